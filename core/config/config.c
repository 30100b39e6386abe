/* core/config/config.c - the configuration: schema-checked values from INI
 * files (inih) and -o overrides, plugin sections checked against the plugin's
 * options table, normalized printing. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/util/error.h"
#include "core/util/fileio.h"
#include "core/util/parse.h"

#define FG_CFG_VALUE_MAX 4096 /* bytes of one value: a sanity bound */

/* Where a value came from: a file line, an -o argument, or the default. */
struct fg_cfg_origin {
	char *text;  /* "conf/x.ini:12" or "-o tier.disk.plugin=x"; NULL: the default */
	int is_file;
	unsigned gen; /* load that set it (duplicate detection); 0: not a file */
	int line;
};

struct fg_cfg_val {
	char *text; /* normalized value */
	struct fg_cfg_origin origin;
};

/* A key of a plugin section that is not in the schema: an option of the plugin,
 * checked when the plugin is opened. */
struct fg_cfg_extra {
	char *section, *key, *value;
	struct fg_cfg_origin origin;
};

struct fg_config {
	size_t n_keys;
	struct fg_cfg_val *vals; /* parallel to fg_cfg_keys[] */
	struct fg_cfg_extra *extras;
	size_t n_extras, cap_extras;
	unsigned gen;
};

/* ---- small helpers ----------------------------------------------------------- */

static char *fg_strdup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static char *fg_printf_dup(const char *fmt, ...) FG_PRINTF(1, 2);
static char *fg_printf_dup(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	s = malloc((size_t)n + 1);
	if (s == NULL)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

static void fg_origin_clear(struct fg_cfg_origin *o)
{
	free(o->text);
	memset(o, 0, sizeof(*o));
}

static int fg_origin_copy(struct fg_cfg_origin *dst, const struct fg_cfg_origin *src)
{
	*dst = *src;
	dst->text = fg_strdup_or_null(src->text);
	return src->text && !dst->text ? -ENOMEM : 0;
}

static void fg_list_sections(char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (const struct fg_cfg_section *s = fg_cfg_sections; s->name && len < n; s++) {
		int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", s->name);

		if (w > 0)
			len += (size_t)w;
	}
}

static size_t fg_list_keys(const char *section, char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (const struct fg_cfg_key *k = fg_cfg_keys; k->section && len < n; k++) {
		int w;

		if (strcmp(k->section, section) != 0)
			continue;
		w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", k->key);
		if (w > 0)
			len += (size_t)w;
	}
	return len < n ? len : n - 1;
}

/* "choices" "a|b|c" -> the choice equal to s (any case), or NULL. */
static const char *fg_enum_match(const char *choices, const char *s, char *buf, size_t n)
{
	const char *p = choices;

	while (*p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (strlen(s) == len && strncasecmp(p, s, len) == 0 && len < n) {
			memcpy(buf, p, len);
			buf[len] = '\0';
			return buf;
		}
		if (!bar)
			break;
		p = bar + 1;
	}
	return NULL;
}

static void fg_enum_list(const char *choices, char *buf, size_t n)
{
	size_t j = 0;

	for (const char *p = choices; *p && j + 3 < n; p++) {
		if (*p == '|') {
			buf[j++] = ',';
			buf[j++] = ' ';
		} else {
			buf[j++] = *p;
		}
	}
	buf[j] = '\0';
}

/* Check `value` against schema row k; on success its normalized text in out. */
static int fg_cfg_normalize(const struct fg_cfg_key *k, const char *value, char *out, size_t n,
			    char *why, size_t wn)
{
	int r;

	switch (k->type) {
	case FG_CFG_BOOL: {
		int v;

		r = fg_parse_bool(value, &v, why, wn);
		if (r == 0)
			snprintf(out, n, "%s", v ? "true" : "false");
		return r;
	}
	case FG_CFG_INT: {
		int64_t v;

		r = fg_parse_int(value, k->min, k->max, &v, why, wn);
		if (r == 0)
			snprintf(out, n, "%" PRId64, v);
		return r;
	}
	case FG_CFG_DOUBLE: {
		double v;

		r = fg_parse_double(value, k->dmin != k->dmax, k->dmin, k->dmax, &v, why, wn);
		if (r == 0)
			fg_format_double(v, out, n);
		return r;
	}
	case FG_CFG_SIZE: {
		uint64_t v;

		r = fg_parse_size(value, &v, why, wn);
		if (r == 0)
			fg_format_size(v, out, n);
		return r;
	}
	case FG_CFG_ENUM: {
		char list[256];

		if (fg_enum_match(k->choices, value, out, n))
			return 0;
		fg_enum_list(k->choices, list, sizeof(list));
		snprintf(why, wn, "not a valid choice, use one of %s", list);
		return -EINVAL;
	}
	case FG_CFG_STRING:
		r = fg_parse_string(value, n, why, wn);
		if (r == 0)
			snprintf(out, n, "%s", value);
		return r;
	}
	snprintf(why, wn, "the schema gives this key an unknown type");
	return -EINVAL;
}

/* ---- creation, copies ---------------------------------------------------------- */

static void fg_extra_clear(struct fg_cfg_extra *e)
{
	free(e->section);
	free(e->key);
	free(e->value);
	fg_origin_clear(&e->origin);
}

void fg_config_free(struct fg_config *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->n_keys; i++) {
		free(c->vals[i].text);
		fg_origin_clear(&c->vals[i].origin);
	}
	free(c->vals);
	for (size_t i = 0; i < c->n_extras; i++)
		fg_extra_clear(&c->extras[i]);
	free(c->extras);
	free(c);
}

int fg_config_new(struct fg_config **out)
{
	struct fg_config *c = calloc(1, sizeof(*c));
	char text[FG_CFG_VALUE_MAX], why[256];

	*out = NULL;
	if (c == NULL)
		goto nomem;
	while (fg_cfg_keys[c->n_keys].section)
		c->n_keys++;
	c->vals = calloc(c->n_keys, sizeof(*c->vals));
	if (c->vals == NULL)
		goto nomem;
	for (size_t i = 0; i < c->n_keys; i++) {
		const struct fg_cfg_key *k = &fg_cfg_keys[i];
		int r = fg_cfg_normalize(k, k->def ? k->def : "", text, sizeof(text), why,
					 sizeof(why));

		/* A default that does not pass its own checks is a bug of schema.c. */
		assert(r == 0);
		(void)r;
		c->vals[i].text = strdup(text);
		if (c->vals[i].text == NULL)
			goto nomem;
	}
	*out = c;
	return 0;
nomem:
	fg_config_free(c);
	FG_ERR("configuration: out of memory");
	return -ENOMEM;
}

static struct fg_config *fg_config_dup(const struct fg_config *c)
{
	struct fg_config *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return NULL;
	d->gen = c->gen;
	d->vals = calloc(c->n_keys, sizeof(*d->vals));
	if (d->vals == NULL)
		goto fail;
	d->n_keys = c->n_keys;
	for (size_t i = 0; i < c->n_keys; i++) {
		d->vals[i].text = strdup(c->vals[i].text);
		if (d->vals[i].text == NULL ||
		    fg_origin_copy(&d->vals[i].origin, &c->vals[i].origin) != 0)
			goto fail;
	}
	if (c->n_extras) {
		d->extras = calloc(c->n_extras, sizeof(*d->extras));
		if (d->extras == NULL)
			goto fail;
		d->cap_extras = c->n_extras;
		for (size_t i = 0; i < c->n_extras; i++) {
			const struct fg_cfg_extra *e = &c->extras[i];
			struct fg_cfg_extra *f = &d->extras[i];

			d->n_extras++;
			f->section = strdup(e->section);
			f->key = strdup(e->key);
			f->value = strdup(e->value);
			if (!f->section || !f->key || !f->value ||
			    fg_origin_copy(&f->origin, &e->origin) != 0)
				goto fail;
		}
	}
	return d;
fail:
	fg_config_free(d);
	return NULL;
}

int fg_config_copy(const struct fg_config *c, const char *drop_options, struct fg_config **out)
{
	struct fg_config *d = fg_config_dup(c);
	size_t kept = 0;

	if (d == NULL) {
		FG_ERR("configuration: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < d->n_extras; i++) {
		if (drop_options && strcmp(d->extras[i].section, drop_options) == 0)
			fg_extra_clear(&d->extras[i]);
		else
			d->extras[kept++] = d->extras[i];
	}
	d->n_extras = kept;
	*out = d;
	return 0;
}

/* Move everything of src into dst and free src's shell. */
static void fg_config_take(struct fg_config *dst, struct fg_config *src)
{
	struct fg_config old = *dst;

	*dst = *src;
	*src = old;
	fg_config_free(src);
}

/* ---- setting values ------------------------------------------------------------ */

/* A source line: where a value comes from, and how errors name it. */
struct fg_cfg_src {
	const char *file; /* path, or NULL for -o */
	int line;
	const char *where; /* -o: the whole "-o section.key=value" */
	unsigned gen;
};

/* Error "<origin>: [section] key = 'value': why" (file) or "<where>: why" (-o). */
static void fg_cfg_value_error(const struct fg_cfg_origin *o, const char *section,
			       const char *key, const char *value, const char *why)
{
	if (o->text == NULL)
		FG_ERR("[%s] %s = '%.200s' (the default): %s", section, key, value, why);
	else if (o->is_file)
		FG_ERR("%s: [%s] %s = '%.200s': %s", o->text, section, key, value, why);
	else
		FG_ERR("%s: %s", o->text, why);
}

static int fg_cfg_make_origin(const struct fg_cfg_src *s, struct fg_cfg_origin *o)
{
	memset(o, 0, sizeof(*o));
	if (s->file) {
		o->text = fg_printf_dup("%s:%d", s->file, s->line);
		o->is_file = 1;
		o->gen = s->gen;
		o->line = s->line;
	} else {
		o->text = strdup(s->where);
	}
	if (o->text == NULL) {
		FG_ERR("configuration: out of memory");
		return -ENOMEM;
	}
	return 0;
}

static int fg_cfg_unknown_section(const struct fg_cfg_src *s, const char *section)
{
	char list[512];

	fg_list_sections(list, sizeof(list));
	if (s->file)
		FG_ERR("%s:%d: unknown section [%.64s]: the sections are %s", s->file, s->line,
		       section, list);
	else
		FG_ERR("%s: unknown section [%.64s]: the sections are %s", s->where, section, list);
	return -EINVAL;
}

static int fg_cfg_duplicate(const struct fg_cfg_src *s, const struct fg_cfg_origin *prev,
			    const char *section, const char *key)
{
	if (s->file && prev->is_file && prev->gen == s->gen) {
		FG_ERR("%s:%d: [%s] %s is set twice in this file (first on line %d): keep one",
		       s->file, s->line, section, key, prev->line);
		return -EINVAL;
	}
	return 0;
}

static int fg_cfg_add_extra(struct fg_config *c, const struct fg_cfg_src *s, const char *section,
			    const char *key, const char *value)
{
	struct fg_cfg_extra *e = NULL;
	struct fg_cfg_origin o;
	char *v;
	int r;

	for (size_t i = 0; i < c->n_extras; i++) {
		if (strcmp(c->extras[i].section, section) == 0 &&
		    strcmp(c->extras[i].key, key) == 0) {
			e = &c->extras[i];
			break;
		}
	}
	if (e) {
		r = fg_cfg_duplicate(s, &e->origin, section, key);
		if (r)
			return r;
	}
	r = fg_cfg_make_origin(s, &o);
	if (r)
		return r;
	v = strdup(value);
	if (v == NULL)
		goto nomem;
	if (e == NULL) {
		if (c->n_extras == c->cap_extras) {
			size_t cap = c->cap_extras ? 2 * c->cap_extras : 8;
			struct fg_cfg_extra *x = realloc(c->extras, cap * sizeof(*x));

			if (x == NULL)
				goto nomem;
			c->extras = x;
			c->cap_extras = cap;
		}
		e = &c->extras[c->n_extras];
		memset(e, 0, sizeof(*e));
		e->section = strdup(section);
		e->key = strdup(key);
		if (!e->section || !e->key) {
			free(e->section);
			free(e->key);
			goto nomem;
		}
		c->n_extras++;
	}
	free(e->value);
	e->value = v;
	fg_origin_clear(&e->origin);
	e->origin = o;
	return 0;
nomem:
	free(v);
	fg_origin_clear(&o);
	FG_ERR("configuration: out of memory");
	return -ENOMEM;
}

/* Set section.key = value from source s: every check of the schema. */
static int fg_cfg_assign(struct fg_config *c, const struct fg_cfg_src *s, const char *section,
			 const char *key, const char *value)
{
	const struct fg_cfg_section *sec = fg_cfg_find_section(section);
	char text[FG_CFG_VALUE_MAX], why[512];
	struct fg_cfg_origin o;
	int row, r;

	if (sec == NULL)
		return fg_cfg_unknown_section(s, section);
	for (const char *p = value; *p; p++) {
		if ((unsigned char)*p < 0x20 && *p != '\t') {
			r = fg_cfg_make_origin(s, &o);
			if (r == 0)
				fg_cfg_value_error(&o, section, key, value,
						   "contains a control character, use plain text");
			fg_origin_clear(&o);
			return r ? r : -EINVAL;
		}
	}
	if (strlen(value) >= FG_CFG_VALUE_MAX) {
		r = fg_cfg_make_origin(s, &o);
		if (r == 0) {
			snprintf(why, sizeof(why), "too long (%zu bytes), use at most %d bytes",
				 strlen(value), FG_CFG_VALUE_MAX - 1);
			fg_cfg_value_error(&o, section, key, value, why);
		}
		fg_origin_clear(&o);
		return r ? r : -EINVAL;
	}
	row = fg_cfg_find_key(section, key);
	if (row < 0) {
		char keys[512];

		if (sec->plugin_kind != 0) {
			if (!fg_plugin_name_valid(key)) {
				if (s->file)
					FG_ERR("%s:%d: [%s] '%.64s' is not a valid key: keys use only "
					       "a-z, 0-9 and _", s->file, s->line, section, key);
				else
					FG_ERR("%s: '%.64s' is not a valid key: keys use only a-z, "
					       "0-9 and _", s->where, key);
				return -EINVAL;
			}
			/* An option of the section's plugin: checked when it is opened. */
			return fg_cfg_add_extra(c, s, section, key, value);
		}
		fg_list_keys(section, keys, sizeof(keys));
		if (s->file)
			FG_ERR("%s:%d: [%s] unknown key '%.64s': the keys of [%s] are %s", s->file,
			       s->line, section, key, section, keys);
		else
			FG_ERR("%s: unknown key '%.64s' in [%s]: its keys are %s", s->where, key,
			       section, keys);
		return -EINVAL;
	}
	r = fg_cfg_duplicate(s, &c->vals[row].origin, section, key);
	if (r)
		return r;
	r = fg_cfg_make_origin(s, &o);
	if (r)
		return r;
	if (fg_cfg_normalize(&fg_cfg_keys[row], value, text, sizeof(text), why, sizeof(why))) {
		fg_cfg_value_error(&o, section, key, value, why);
		fg_origin_clear(&o);
		return -EINVAL;
	}
	if (sec->plugin_kind != 0 && strcmp(key, "plugin") == 0 && !fg_plugin_name_valid(text)) {
		fg_cfg_value_error(&o, section, key, value,
				   "not a plugin name, use the name of a plugin (a-z, 0-9 and _; "
				   "`fgcore plugins` lists them)");
		fg_origin_clear(&o);
		return -EINVAL;
	}
	{
		char *t = strdup(text);

		if (t == NULL) {
			fg_origin_clear(&o);
			FG_ERR("configuration: out of memory");
			return -ENOMEM;
		}
		free(c->vals[row].text);
		c->vals[row].text = t;
		fg_origin_clear(&c->vals[row].origin);
		c->vals[row].origin = o;
	}
	return 0;
}

static char *fg_trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int fg_config_set(struct fg_config *c, const char *assignment, const char *where)
{
	struct fg_cfg_src s = { 0 };
	char *copy, *owned_where = NULL, *eq, *dot, *lhs, *value;
	int r;

	if (where == NULL) {
		owned_where = fg_printf_dup("-o %s", assignment);
		if (owned_where == NULL) {
			FG_ERR("configuration: out of memory");
			return -ENOMEM;
		}
		where = owned_where;
	}
	s.where = where;
	copy = strdup(assignment);
	if (copy == NULL) {
		free(owned_where);
		FG_ERR("configuration: out of memory");
		return -ENOMEM;
	}
	eq = strchr(copy, '=');
	if (eq == NULL) {
		FG_ERR("%s: expected section.key=value, e.g. -o policy.gpu_batch_size=8", where);
		r = -EINVAL;
		goto out;
	}
	*eq = '\0';
	lhs = fg_trim(copy);
	value = fg_trim(eq + 1);
	/* Section names contain dots ("tier.disk"): the key follows the last one. */
	dot = strrchr(lhs, '.');
	if (dot == NULL || dot == lhs || dot[1] == '\0') {
		FG_ERR("%s: expected section.key=value, e.g. -o policy.gpu_batch_size=8", where);
		r = -EINVAL;
		goto out;
	}
	*dot = '\0';
	r = fg_cfg_assign(c, &s, lhs, dot + 1, value);
out:
	free(copy);
	free(owned_where);
	return r;
}

/* ---- files ------------------------------------------------------------------ */

struct fg_cfg_load {
	struct fg_config *c;
	const char *path;
	FILE *f;
	unsigned gen;
	int lineno;
	int failed;      /* an error line is recorded: stop */
	int fail_line;   /* ... about this line */
	int have_key;    /* a key was read since the last section header (inih's prev_name) */
	char *buf;
	size_t cap;
};

static void fg_cfg_fail(struct fg_cfg_load *st)
{
	st->failed = 1;
	st->fail_line = st->lineno;
}

/* Check a "[section]" header as inih will read it. */
static int fg_cfg_header(struct fg_cfg_load *st, const char *start)
{
	const char *close = strchr(start + 1, ']');
	char name[128];
	size_t len;
	struct fg_cfg_src s = { .file = st->path, .line = st->lineno };

	if (close == NULL)
		return 0; /* inih reports it as a malformed line */
	len = (size_t)(close - start - 1);
	if (len >= sizeof(name))
		len = sizeof(name) - 1;
	memcpy(name, start + 1, len);
	name[len] = '\0';
	if (fg_cfg_find_section(name) == NULL)
		return fg_cfg_unknown_section(&s, name);
	return 0;
}

/* inih's reader: one whole line per call, so that our line count is inih's,
 * and the checks inih cannot make (line length, NUL bytes, section names,
 * continuation lines). */
static char *fg_cfg_reader(char *str, int num, void *stream)
{
	struct fg_cfg_load *st = stream;
	ssize_t len;
	const char *start;

	if (st->failed)
		return NULL;
	len = getline(&st->buf, &st->cap, st->f);
	if (len < 0)
		return NULL;
	st->lineno++;
	if (strlen(st->buf) != (size_t)len) {
		FG_ERR("%s:%d: the line contains a NUL byte: a configuration is a text file",
		       st->path, st->lineno);
		fg_cfg_fail(st);
		return NULL;
	}
	while (len > 0 && (st->buf[len - 1] == '\n' || st->buf[len - 1] == '\r'))
		st->buf[--len] = '\0';
	/* Leave room for the '\n' we add, so that inih never thinks the line
	 * was cut (and never reads the next one as its continuation). */
	if (num < 3 || len > num - 2) {
		FG_ERR("%s:%d: line longer than %d characters (the INI parser's limit): shorten "
		       "it (e.g. a symbolic link for a long path)", st->path, st->lineno,
		       num < 3 ? 0 : num - 2);
		fg_cfg_fail(st);
		return NULL;
	}
	start = st->buf;
	while (*start == ' ' || *start == '\t')
		start++;
	if (*start != '\0' && *start != ';' && *start != '#') {
		if (start > st->buf && st->have_key) {
			/* inih would append this line to the previous key's value. */
			FG_ERR("%s:%d: indented line: continuation lines are not supported, remove "
			       "the leading whitespace", st->path, st->lineno);
			fg_cfg_fail(st);
			return NULL;
		}
		if (*start == '[') {
			st->have_key = 0;
			if (fg_cfg_header(st, start) != 0) {
				fg_cfg_fail(st);
				return NULL;
			}
		}
	}
	memcpy(str, st->buf, (size_t)len);
	str[len] = '\n';
	str[len + 1] = '\0';
	return str;
}

static int fg_cfg_handler(void *user, const char *section, const char *name, const char *value)
{
	struct fg_cfg_load *st = user;
	struct fg_cfg_src s = { .file = st->path, .line = st->lineno, .gen = st->gen };

	if (st->failed)
		return 0;
	st->have_key = 1;
	if (*section == '\0') {
		FG_ERR("%s:%d: key '%.64s' is outside any section: put it under a [section] "
		       "header", st->path, st->lineno, name);
		fg_cfg_fail(st);
		return 0;
	}
	if (fg_cfg_assign(st->c, &s, section, name, value ? value : "") != 0) {
		fg_cfg_fail(st);
		return 0;
	}
	return 1;
}

int fg_config_load(struct fg_config *c, const char *path)
{
	struct fg_cfg_load st = { .path = path };
	int r, e;

	/* A regular file or /dev/null (no settings): a FIFO would hang open(2),
	 * a directory reads as nothing. */
	r = fg_open_file(path, FG_OPEN_NULL_OK, NULL);
	if (r < 0) {
		if (r != -EINVAL)
			FG_ERR("%s: cannot open: %s: check the path (-c, FGCORE_CONFIG)", path,
			       strerror(-r));
		return r;
	}
	st.f = fdopen(r, "r");
	if (st.f == NULL) {
		e = errno;
		close(r);
		FG_ERR("%s: cannot open: %s", path, strerror(e));
		return -e;
	}
	st.c = fg_config_dup(c);
	if (st.c == NULL) {
		fclose(st.f);
		FG_ERR("%s: out of memory", path);
		return -ENOMEM;
	}
	st.gen = ++st.c->gen;
	r = ini_parse_stream(fg_cfg_reader, &st, fg_cfg_handler, &st);
	/* inih returns the first bad line: a malformed one before ours wins. */
	if (r > 0 && (!st.failed || r < st.fail_line)) {
		FG_ERR("%s:%d: malformed line: expected [section], key = value, or a comment "
		       "starting with ; or #", path, r);
		r = -EINVAL;
	} else if (st.failed) {
		r = -EINVAL;
	} else if (ferror(st.f)) {
		FG_ERR("%s: read error after line %d", path, st.lineno);
		r = -EIO;
	} else if (r < 0) {
		FG_ERR("%s: out of memory", path);
		r = -ENOMEM;
	}
	free(st.buf);
	fclose(st.f);
	if (r != 0) {
		fg_config_free(st.c);
		return r;
	}
	fg_config_take(c, st.c);
	return 0;
}

/* ---- reading values ------------------------------------------------------------ */

const char *fg_config_get(const struct fg_config *c, const char *section, const char *key)
{
	int row = fg_cfg_find_key(section, key);

	if (row >= 0)
		return c->vals[row].text;
	for (size_t i = 0; i < c->n_extras; i++)
		if (strcmp(c->extras[i].section, section) == 0 &&
		    strcmp(c->extras[i].key, key) == 0)
			return c->extras[i].value;
	return NULL;
}

static const char *fg_config_typed(const struct fg_config *c, const char *section,
				   const char *key, enum fg_cfg_type t)
{
	int row = fg_cfg_find_key(section, key);

	assert(row >= 0 && "key not in the configuration schema");
	assert((fg_cfg_keys[row].type == t ||
		(t == FG_CFG_STRING && fg_cfg_keys[row].type == FG_CFG_ENUM)) &&
	       "key of another type");
	(void)t;
	return c->vals[row].text;
}

enum fg_config_origin fg_config_origin_of(const struct fg_config *c, const char *section,
					  const char *key)
{
	int row = fg_cfg_find_key(section, key);

	assert(row >= 0 && "key not in the configuration schema");
	if (c->vals[row].origin.text == NULL)
		return FG_CONFIG_DEFAULT;
	return c->vals[row].origin.is_file ? FG_CONFIG_FROM_FILE : FG_CONFIG_FROM_ARGS;
}

const char *fg_config_origin_text(const struct fg_config *c, const char *section,
				  const char *key)
{
	int row = fg_cfg_find_key(section, key);

	assert(row >= 0 && "key not in the configuration schema");
	return c->vals[row].origin.text;
}

int64_t fg_config_int(const struct fg_config *c, const char *section, const char *key)
{
	return strtoll(fg_config_typed(c, section, key, FG_CFG_INT), NULL, 10);
}

double fg_config_double(const struct fg_config *c, const char *section, const char *key)
{
	return strtod(fg_config_typed(c, section, key, FG_CFG_DOUBLE), NULL);
}

int fg_config_bool(const struct fg_config *c, const char *section, const char *key)
{
	return strcmp(fg_config_typed(c, section, key, FG_CFG_BOOL), "true") == 0;
}

uint64_t fg_config_size(const struct fg_config *c, const char *section, const char *key)
{
	uint64_t v = 0;
	char why[256];

	fg_parse_size(fg_config_typed(c, section, key, FG_CFG_SIZE), &v, why, sizeof(why));
	return v;
}

const char *fg_config_str(const struct fg_config *c, const char *section, const char *key)
{
	return fg_config_typed(c, section, key, FG_CFG_STRING);
}

/* ---- plugins --------------------------------------------------------------------- */

int fg_config_open_plugin(const struct fg_config *c, const char *section, uint32_t kind,
			  struct fg_plugin_handle *ph, void **opts)
{
	const struct fg_cfg_section *sec = fg_cfg_find_section(section);
	const struct fg_cfg_val *pv;
	void *o;
	int row, r;

	*opts = NULL;
	memset(ph, 0, sizeof(*ph));
	row = sec ? fg_cfg_find_key(section, "plugin") : -1;
	if (sec == NULL || sec->plugin_kind == 0 || row < 0) {
		FG_ERR("[%s] is not a plugin section", section);
		return -EINVAL;
	}
	pv = &c->vals[row];
	r = fg_plugin_load(pv->text, kind ? kind : sec->plugin_kind, ph);
	if (r != 0) {
		char why[1024];

		snprintf(why, sizeof(why), "%s", fg_last_error());
		fg_cfg_value_error(&pv->origin, section, "plugin", pv->text, why);
		return r;
	}
	o = fg_plugin_opts_new(ph->plugin);
	if (o == NULL) {
		fg_plugin_close(ph);
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->n_extras; i++) {
		const struct fg_cfg_extra *e = &c->extras[i];
		const struct fg_option *opt;
		char why[1024];

		if (strcmp(e->section, section) != 0)
			continue;
		opt = fg_plugin_find_option(ph->plugin, e->key);
		if (opt == NULL) {
			char keys[512];
			size_t len = fg_list_keys(section, keys, sizeof(keys));
			const struct fg_option *k = ph->plugin->options;

			for (; k && k->key && len < sizeof(keys); k++) {
				int w = snprintf(keys + len, sizeof(keys) - len, ", %s", k->key);

				if (w > 0)
					len += (size_t)w;
			}
			snprintf(why, sizeof(why), "unknown key for plugin %s, the keys of [%s] are %s",
				 ph->plugin->name, section, keys);
			if (e->origin.is_file)
				FG_ERR("%s: [%s] %s: %s", e->origin.text, section, e->key, why);
			else
				FG_ERR("%s: %s", e->origin.text, why);
			r = -EINVAL;
			break;
		}
		if (fg_plugin_opt_parse(opt, o, e->value, why, sizeof(why)) != 0) {
			fg_cfg_value_error(&e->origin, section, e->key, e->value, why);
			r = -EINVAL;
			break;
		}
	}
	if (r != 0) {
		free(o);
		fg_plugin_close(ph);
		return r;
	}
	*opts = o;
	return 0;
}

int fg_config_check(struct fg_config *c)
{
	for (const struct fg_cfg_section *s = fg_cfg_sections; s->name; s++) {
		struct fg_plugin_handle ph;
		void *opts;
		int r;

		if (s->plugin_kind == 0)
			continue;
		r = fg_config_open_plugin(c, s->name, s->plugin_kind, &ph, &opts);
		if (r != 0)
			return r;
		free(opts);
		fg_plugin_close(&ph);
	}
	return 0;
}

/* ---- printing ---------------------------------------------------------------------- */

static void fg_print_key(FILE *out, const char *key, const char *value)
{
	fprintf(out, "%s =%s%s\n", key, *value ? " " : "", value);
}

/* The plugin's options of a plugin section, with the section's values applied. */
static void fg_print_plugin_keys(const struct fg_config *c, const struct fg_cfg_section *sec,
				 FILE *out)
{
	struct fg_plugin_handle ph;
	const char *name = fg_config_get(c, sec->name, "plugin");
	void *opts = NULL;
	char buf[FG_OPT_STRING_MAX + 64], why[512];
	int loaded;

	loaded = fg_plugin_load(name, sec->plugin_kind, &ph) == 0;
	if (loaded)
		opts = fg_plugin_opts_new(ph.plugin);
	if (loaded && opts) {
		for (const struct fg_option *o = ph.plugin->options; o && o->key; o++) {
			/* An option set to a bad value is shown as given (check reports it). */
			const char *raw = NULL;

			for (size_t i = 0; i < c->n_extras; i++)
				if (!strcmp(c->extras[i].section, sec->name) &&
				    !strcmp(c->extras[i].key, o->key))
					raw = c->extras[i].value;
			if (raw && fg_plugin_opt_parse(o, opts, raw, why, sizeof(why)) != 0)
				fg_print_key(out, o->key, raw);
			else
				fg_print_key(out, o->key,
					     fg_plugin_opt_format(o, opts, buf, sizeof(buf)));
		}
	} else {
		fprintf(out, "; plugin %s could not be opened: its options are not shown\n", name);
	}
	/* Keys the plugin does not know (or all of them when it did not load). */
	for (size_t i = 0; i < c->n_extras; i++) {
		const struct fg_cfg_extra *e = &c->extras[i];

		if (strcmp(e->section, sec->name) != 0)
			continue;
		if (loaded && opts && fg_plugin_find_option(ph.plugin, e->key))
			continue;
		fg_print_key(out, e->key, e->value);
	}
	free(opts);
	if (loaded)
		fg_plugin_close(&ph);
}

int fg_config_print(const struct fg_config *c, FILE *out)
{
	fprintf(out, "; fgcore configuration: every key, defaults included\n");
	for (const struct fg_cfg_section *sec = fg_cfg_sections; sec->name; sec++) {
		fprintf(out, "\n[%s]\n", sec->name);
		for (size_t i = 0; i < c->n_keys; i++) {
			if (strcmp(fg_cfg_keys[i].section, sec->name) != 0)
				continue;
			fg_print_key(out, fg_cfg_keys[i].key, c->vals[i].text);
		}
		if (sec->plugin_kind != 0)
			fg_print_plugin_keys(c, sec, out);
	}
	if (fflush(out) != 0 || ferror(out)) {
		int e = errno ? errno : EIO;

		FG_ERR("cannot write the configuration: %s", strerror(e));
		return -e;
	}
	return 0;
}
