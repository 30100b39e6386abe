/* core/config/schema.h - every section and key the configuration knows.
 *
 * New keys are new rows of fg_cfg_keys[]; new sections new rows of
 * fg_cfg_sections[].  The parser, the printer, `fgcore config --man` and the
 * typed getters all work from these tables. */
#ifndef FG_CONFIG_SCHEMA_H
#define FG_CONFIG_SCHEMA_H

#include <stdint.h>

enum fg_cfg_type {
	FG_CFG_BOOL = 1,
	FG_CFG_INT,    /* int64_t within [min, max] (when min != max) */
	FG_CFG_DOUBLE, /* double within [dmin, dmax] (when dmin != dmax) */
	FG_CFG_SIZE,   /* uint64_t bytes, suffixes K M G T */
	FG_CFG_STRING,
	FG_CFG_ENUM,   /* one of `choices` ("a|b|c") */
};

struct fg_cfg_section {
	const char *name;     /* "tier.disk" */
	uint32_t plugin_kind; /* 0, or the plugin kind its `plugin` key names: the
	                         section then also takes that plugin's options */
	const char *help;     /* one or two sentences for fgcore.ini(5) */
};

struct fg_cfg_key {
	const char *section;
	const char *key;
	enum fg_cfg_type type;
	const char *def;      /* default as text ("" for none) */
	const char *help;     /* one sentence */
	int64_t min, max;     /* FG_CFG_INT */
	double dmin, dmax;    /* FG_CFG_DOUBLE */
	const char *choices;  /* FG_CFG_ENUM: "a|b|c" */
};

/* Both tables end with a row whose name / section is NULL. */
extern const struct fg_cfg_section fg_cfg_sections[];
extern const struct fg_cfg_key fg_cfg_keys[];

const struct fg_cfg_section *fg_cfg_find_section(const char *name);
/* Row index of section.key in fg_cfg_keys, or -1. */
int fg_cfg_find_key(const char *section, const char *key);
const char *fg_cfg_type_name(enum fg_cfg_type t);

#endif
