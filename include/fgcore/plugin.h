/* fgcore/plugin.h - the plugin ABI: the one exported symbol, host services, options.
 *
 * A plugin is a shared object exporting exactly one symbol, `fg_plugin_entry`,
 * a `struct fg_plugin`.  The core checks the ABI version, kind, name and every
 * required hook before it runs any plugin code (including `probe`).
 *
 * Versions: one major for every kind, and a minor per kind, so that an
 * addition to one kind's hooks leaves the others' plugins as they are.  Each
 * kind's header defines its current version, and a plugin of that kind
 * declares it:
 *   storage    FG_STORAGE_ABI_VERSION    fgcore/storage.h
 *   compute    FG_COMPUTE_ABI_VERSION    fgcore/compute.h
 *   codec      FG_CODEC_ABI_VERSION      fgcore/codec.h
 *   transport  FG_TRANSPORT_ABI_VERSION  fgcore/transport.h
 * The kinds shared one minor up to 1.10, so every kind's counter continues
 * from 10: a plugin built before the split (it says 1.10, or less) loads.
 *
 * Compatibility rules:
 *  - major must equal the host's FG_ABI_MAJOR; minor must be <= the host's
 *    minor for the plugin's kind.
 *  - structs in this ABI only grow at the end; a member added in minor n of a
 *    kind is read by the core only when the plugin's abi_version >=
 *    FG_ABI(major, n) (the kind's history is in its header).
 */
#ifndef FGCORE_PLUGIN_H
#define FGCORE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FG_ABI(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define FG_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
#define FG_ABI_MINOR_OF(v) ((uint32_t)(v) & 0xffffu)

#define FG_ABI_MAJOR 1
/* The minor of what every kind shares: struct fg_plugin, fg_host and
 * fg_option (fg_host.abi_version says it to plugins).  It stays 10 until one
 * of them grows, and such a change bumps every kind's minor too, so each
 * kind's minor is at least this one.  A plugin that declares FG_ABI_VERSION,
 * as all did before the split, therefore still loads, and the core treats it
 * as its kind's minor FG_ABI_MINOR: what its kind added later is never read
 * from it.  Deprecated as a plugin's abi_version: declare your kind's
 * FG_<KIND>_ABI_VERSION (a maximum over the kinds would not do: a storage
 * plugin would claim compute's newer minor and be refused). */
#define FG_ABI_MINOR 10
#define FG_ABI_VERSION FG_ABI(FG_ABI_MAJOR, FG_ABI_MINOR)

/* Name of the one symbol every plugin exports. */
#define FG_PLUGIN_ENTRY "fg_plugin_entry"

#if defined(__GNUC__)
#define FG_PLUGIN_EXPORT __attribute__((visibility("default")))
#define FG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FG_PLUGIN_EXPORT
#define FG_PRINTF(a, b)
#endif

enum fg_plugin_kind {
	FG_PLUGIN_STORAGE = 1,
	FG_PLUGIN_COMPUTE = 2,
	FG_PLUGIN_CODEC = 3,
	FG_PLUGIN_TRANSPORT = 4, /* fgcore/transport.h: messages between pipeline ranks */
};

enum fg_log_level {
	FG_LOG_ERROR = 0,
	FG_LOG_WARN = 1,
	FG_LOG_INFO = 2,
	FG_LOG_DEBUG = 3,
};

/* Services the core lends to plugins.  Plugins never call symbols of the
 * executable; everything goes through this table. */
struct fg_host {
	uint32_t abi_version; /* FG_ABI_VERSION: the shared part's version */
	/* Record the error text of the failing call (one line, no newline:
	 * what is wrong and what to do).  The last call wins. */
	void (*error)(const struct fg_host *host, const char *fmt, ...) FG_PRINTF(2, 3);
	void (*log)(const struct fg_host *host, int level, const char *fmt, ...) FG_PRINTF(3, 4);
	/* NVIDIA GPUs the core counted without CUDA (/proc/driver/nvidia/gpus,
	 * else /dev/nvidiaN), limited by CUDA_VISIBLE_DEVICES as CUDA limits it;
	 * counted once, at first use; 0 without a GPU. */
	int gpu_count;
	void *priv; /* core-private */
};

#define fg_error(host, ...) ((host)->error((host), __VA_ARGS__))
#define fg_log(host, level, ...) ((host)->log((host), (level), __VA_ARGS__))

/* Plugin options: a table the core fills from the plugin's INI section into
 * a private struct of `opts_size` bytes before calling the plugin's init/open. */
enum fg_option_type {
	FG_OPT_BOOL = 1,   /* int: 0 or 1; accepts true/false/yes/no/on/off/1/0 */
	FG_OPT_INT = 2,    /* int64_t, within [min, max] */
	FG_OPT_SIZE = 3,   /* uint64_t bytes; accepts suffixes K M G T (powers of 1024) */
	FG_OPT_STRING = 4, /* char[FG_OPT_STRING_MAX], NUL-terminated */
	FG_OPT_DOUBLE = 5, /* double, within [min, max] */
};

#define FG_OPT_STRING_MAX 256

struct fg_option {
	const char *key;
	enum fg_option_type type;
	const char *def;  /* default, as text; NULL for "" / 0 */
	const char *help; /* one sentence, shown by `fgcore plugins` and fgcore.ini(5) */
	size_t offset;    /* offsetof(struct <plugin>_opts, member) */
	int64_t min, max; /* for INT (and DOUBLE, as integers); ignored when min == max */
};

struct fg_plugin {
	uint32_t abi_version;     /* first, always: FG_<KIND>_ABI_VERSION at build time */
	uint32_t kind;            /* enum fg_plugin_kind */
	const char *name;         /* must equal the file's base name and the `plugin =` value */
	const char *description;  /* one line */
	int (*probe)(const struct fg_host *host); /* optional: 0 unusable here, >0 usable */
	const void *ops;          /* struct fg_storage_ops / fg_compute_ops / fg_codec_ops / fg_transport_ops */
	const struct fg_option *options; /* optional: terminated by { .key = NULL } */
	size_t opts_size;         /* bytes of the options struct (0 when no options) */
	const char *capabilities; /* optional: comma-separated words, e.g. "async,o_direct" */
};

#ifdef __cplusplus
}
#endif
#endif
