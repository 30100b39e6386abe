/* plugins/storage/fault_rules.h - the fault-injection rules of the file-backed
 * storage plugins (FGCORE_POSIX_FILE_FAULT, FGCORE_IO_URING_FAULT,
 * FGCORE_LIBAIO_FAULT), parsed once here.
 *
 * A value holds up to FAULT_RULES_MAX comma-separated rules "op:ERRNO:N":
 * op is read or write, ERRNO a name such as EIO or ENOSPC or a number
 * 1..4095 (or SHORT, where the plugin allows it), N >= 1 the request (or
 * piece) of that op, counted by the plugin from 1, that fails.  Compiled into
 * each plugin that uses it; hidden like the rest of the plugin.
 */
#ifndef FG_PLUGINS_STORAGE_FAULT_RULES_H
#define FG_PLUGINS_STORAGE_FAULT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAULT_RULES_MAX 8
#define FAULT_SHORT (-1) /* not an errno: the transfer stops half-way */

struct fault_rule {
	int op;       /* FG_IO_READ or FG_IO_WRITE */
	int err;      /* positive errno, or FAULT_SHORT */
	uint64_t nth;
};

struct fault_rules {
	struct fault_rule rule[FAULT_RULES_MAX];
	int n;
};

/* Parse val into f: 0, or -EINVAL for a malformed value (an empty one too),
 * with no message: the caller says what it expects.  allow_short: accept
 * ERRNO "SHORT". */
int fault_rules_parse(struct fault_rules *f, const char *val, bool allow_short);

/* What the nth request of op meets: the errno to inject, FAULT_SHORT, or 0. */
int fault_rules_match(const struct fault_rules *f, int op, uint64_t nth);

/* A decimal number of 1..19 digits filling s[0, n). */
bool fault_rules_u64(const char *s, size_t n, uint64_t *out);

#endif
