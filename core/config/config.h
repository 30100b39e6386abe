/* core/config/config.h - the configuration's internal interface: typed getters,
 * plugin sections, the fgcore.ini(5) generator.  The public part (new, load,
 * set, get, check, print) is in fgcore/fgcore.h. */
#ifndef FG_CONFIG_CONFIG_H
#define FG_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include <fgcore/fgcore.h>
#include "core/plugin/loader.h"

/* Typed values of schema keys (core/config/schema.c).  Asking for a key that
 * is not in the schema, or with the wrong type, is a programmer error (assert).
 * fg_config_str works for string and enum keys and never returns NULL. */
int64_t fg_config_int(const struct fg_config *c, const char *section, const char *key);
double fg_config_double(const struct fg_config *c, const char *section, const char *key);
int fg_config_bool(const struct fg_config *c, const char *section, const char *key);
uint64_t fg_config_size(const struct fg_config *c, const char *section, const char *key);
const char *fg_config_str(const struct fg_config *c, const char *section, const char *key);

/* Where a schema key's value came from: its default, a configuration file, or
 * the command line (fg_config_set: -o or a FlexGen flag). */
enum fg_config_origin { FG_CONFIG_DEFAULT, FG_CONFIG_FROM_FILE, FG_CONFIG_FROM_ARGS };
enum fg_config_origin fg_config_origin_of(const struct fg_config *c, const char *section,
					  const char *key);

/* Load the plugin that `section.plugin` names (kind `kind`; 0: the section's
 * kind), create its option struct with the defaults and apply the section's
 * other keys.  On success *ph holds the plugin and *opts the struct (free()).
 * Errors name the origin ("file:line" or "-o ...") of the offending key. */
int fg_config_open_plugin(const struct fg_config *c, const char *section, uint32_t kind,
			  struct fg_plugin_handle *ph, void **opts);

/* A copy of c (free it with fg_config_free); drop_options, when not NULL, names
 * a plugin section whose plugin options (its keys outside the schema) are left
 * out, so that another plugin can be set there (`bench --ab compute.plugin=...`). */
int fg_config_copy(const struct fg_config *c, const char *drop_options, struct fg_config **out);

/* Write fgcore.ini(5), in roff: every section and key of the schema and the
 * options of every plugin found in the plugin search path. */
int fg_config_write_man(FILE *out);

#endif
