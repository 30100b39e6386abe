/* core/plugin/loader.h - find, dlopen and validate plugins; fill their option structs. */
#ifndef FG_PLUGIN_LOADER_H
#define FG_PLUGIN_LOADER_H

#include <limits.h>
#include <fgcore/plugin.h>

struct fg_plugin_handle {
	const struct fg_plugin *plugin;
	void *dl;
	char path[PATH_MAX];
};

/* Open one file and validate it: exported fg_plugin_entry, ABI major equal,
 * a known kind and a minor <= ours for that kind, kind == want_kind (0: any),
 * name == want_name (NULL: the file's base name without ".so"), every
 * required hook of the kind present
 * (for compute: those of the plugin's ABI minor, the stream/event hooks all
 * or none; members newer than the plugin's minor are never read).
 * No plugin code runs before all checks pass.  On failure: -errno and an error
 * line "<path>: <reason>". */
int fg_plugin_open_file(const char *path, uint32_t want_kind, const char *want_name,
			struct fg_plugin_handle *out);

/* Find "<dir>/<name>.so" in the search path (FGCORE_PLUGIN_PATH entries,
 * colon-separated, then the installed plugin directory) and open it. */
int fg_plugin_load(const char *name, uint32_t want_kind, struct fg_plugin_handle *out);

void fg_plugin_close(struct fg_plugin_handle *h);

/* Call cb for every "*.so" file in the search path (first occurrence of a
 * name wins), in directory order then name order.  Stops when cb returns != 0. */
int fg_plugin_foreach(int (*cb)(const char *path, void *user), void *user);

/* "storage", "compute", "codec", "transport", "?" */
const char *fg_plugin_kind_name(uint32_t kind);

/* The ABI version this fgcore speaks for plugins of `kind` (its header's
 * FG_<KIND>_ABI_VERSION); 0 for an unknown kind. */
uint32_t fg_plugin_kind_abi(uint32_t kind);
/* Every kind's version in one phrase, "storage 1.10, compute 1.11, ..."; returns buf. */
const char *fg_plugin_abi_text(char *buf, size_t n);
/* A plugin of `kind` declaring `abi` against a host speaking `host` for that
 * kind (fg_plugin_kind_abi(kind) when loading; the major is checked before):
 * 0, or -ENOTSUP and "<path>: <kind> plugin built for <kind> ABI 1.n, newer
 * than this fgcore's <kind> ABI 1.m: <what to do>". */
int fg_plugin_check_minor(const char *path, uint32_t kind, uint32_t abi, uint32_t host);

/* Run the plugin's probe (1 when it has none): >0 usable, 0 unusable. */
int fg_plugin_probe(const struct fg_plugin_handle *h);

/* Options: a zeroed struct of plugin->opts_size bytes with every default
 * applied (NULL and an error line on failure); free with free(). */
void *fg_plugin_opts_new(const struct fg_plugin *p);
/* Parse and store one option.  `where` prefixes errors ("conf/x.ini:12").
 * Unknown key, bad type or out-of-range value: -EINVAL with one line
 * "<where>: <what is wrong>, <what is allowed>". */
int fg_plugin_opts_set(const struct fg_plugin *p, void *opts, const char *key,
		       const char *value, const char *where);

/* ---- building blocks of the above, for the configuration layer ---------- */

/* 1 when name is a valid plugin name: [a-z0-9_]+, shorter than 64 bytes. */
int fg_plugin_name_valid(const char *name);

/* The option `key` of p, or NULL. */
const struct fg_option *fg_plugin_find_option(const struct fg_plugin *p, const char *key);

/* Parse `value` into o's member of opts.  On failure: -EINVAL and
 * "<what is wrong>, <what is allowed>" in why[n]; no error line is recorded. */
int fg_plugin_opt_parse(const struct fg_option *o, void *opts, const char *value, char *why,
			size_t n);

/* The normalized text of o's member of opts ("true", "64M", "0.5", ...). */
const char *fg_plugin_opt_format(const struct fg_option *o, const void *opts, char *buf,
				 size_t n);

/* "bool", "int", "size", "string", "double" ("?" otherwise). */
const char *fg_option_type_name(enum fg_option_type t);

/* The search path as one colon-separated line, for messages. */
void fg_plugin_search_path(char *buf, size_t n);

#endif
