/* core/tier/fault_shim.h - fault injection and a slow disk for any storage
 * plugin, as one storage shim that the tier stacks over the plugin.
 *
 * The shim is itself a struct fg_storage_ops: it passes every call through
 * to the plugin below, except that
 *   - FGCORE_<PLUGIN>_FAULT (e.g. FGCORE_POSIX_FILE_FAULT) holds up to 8
 *     comma-separated rules "read:EIO:N" / "write:ENOSPC:N": the Nth read (or
 *     write) request of this tier, counting from 1 across read/write and
 *     submit, fails with that errno (a name or a number) without reaching the
 *     plugin; ERRNO "SHORT" instead has the request reach the plugin in two
 *     halves, the second after the first, as a short transfer resumed;
 *   - FGCORE_<PLUGIN>_DELAY_US (0..1000000) holds every asynchronous request
 *     that long after its submit before the plugin gets it, so that a caller
 *     that reuses a buffer before reaping its request sees the damage every
 *     time instead of once in a thousand runs.
 * <PLUGIN> is the plugin's name in capitals; io_uring_nvme and libaio_nvme
 * also answer to their older names FGCORE_IO_URING_FAULT and
 * FGCORE_LIBAIO_FAULT.  Both are read when the tier opens; an empty value is
 * no value, a malformed one makes the open fail with a line naming it.
 *
 * The shim has submit/reap whether or not the plugin has them: for a plugin
 * without, it performs the requests through read/write.
 */
#ifndef FG_TIER_FAULT_SHIM_H
#define FG_TIER_FAULT_SHIM_H

#include <fgcore/storage.h>

#include "core/tier/fault_rules.h"

/* What fg_fault_shim_ops.open takes as its options. */
struct fg_fault_shim_opts {
	const struct fg_storage_ops *inner; /* the plugin below */
	const void *inner_opts;             /* its options */
	char who[96];                       /* "tier disk (posix_file)", for messages */
	char fault_env[64];                 /* the variable the rules came from */
	char delay_env[64];
	struct fg_fault_rules rules;
	unsigned delay_us;
};

/* Read the variables of the plugin `plugin` opened as tier `role`: 1 when
 * they ask for the shim (o filled, but for inner and inner_opts), 0 when they
 * do not, -EINVAL with a line naming the variable for a malformed value. */
int fg_fault_shim_config(const char *plugin, const char *role, struct fg_fault_shim_opts *o);

extern const struct fg_storage_ops fg_fault_shim_ops;

#endif
