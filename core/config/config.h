/* core/config/config.h - the configuration's internal interface: plugin
 * sections, copies, the fgcore.ini(5) generator.  The public part (new,
 * load, set, get, typed values, check, print) is in fgcore/fgcore.h. */
#ifndef FG_CONFIG_CONFIG_H
#define FG_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include <fgcore/fgcore.h>
#include "core/plugin/loader.h"

/* Load the plugin that `section.plugin` names (kind `kind`; 0: the section's
 * kind), create its option struct with the defaults and apply the section's
 * other keys.  On success *ph holds the plugin and *opts the struct (free()).
 * Errors name the origin ("file:line" or "-o ...") of the offending key. */
int fg_config_open_plugin(const struct fg_config *c, const char *section, uint32_t kind,
			  struct fg_plugin_handle *ph, void **opts);

/* Where section.key's value came from, as errors name it: "file:line", the
 * text that set it ("-o section.key=value", "--percent ..."), or NULL for
 * the default.  Valid while c lives. */
const char *fg_config_origin_text(const struct fg_config *c, const char *section,
				  const char *key);

/* A copy of c (free it with fg_config_free); drop_options, when not NULL, names
 * a plugin section whose plugin options (its keys outside the schema) are left
 * out, so that another plugin can be set there (`bench --ab compute.plugin=...`). */
int fg_config_copy(const struct fg_config *c, const char *drop_options, struct fg_config **out);

/* Write fgcore.ini(5), in roff: every section and key of the schema and the
 * options of every plugin found in the plugin search path. */
int fg_config_write_man(FILE *out);

#endif
