/* cli/flexgen_flags.c - FlexGen's command-line flags as configuration
 * overrides, so that a FlexGen user's command line works unchanged:
 *   fgcore bench --model facebook/opt-30b --path _DUMMY_ --percent 20 80 0 100 0 100 \
 *                --gpu-batch-size 48 --num-gpu-batches 3 --cpu --debug fewer_batch
 * They are parsed as FlexGen's argparse parser parses them (unique prefixes,
 * --flag=value, str2bool values) and may stand before or after the command.
 * Nothing here has a fixed-size buffer for user text: every string is sized
 * from its parts, and messages clip what they quote. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/flexgen_flags.h"

enum kind {
	K_SWITCH,  /* store_true: no value */
	K_BOOL,    /* str2bool with nargs='?': an optional true/false */
	K_VALUE,   /* one value */
	K_PERCENT, /* six integers */
	K_VERBOSE, /* one integer (fgcore's own --verbose takes none) */
};

struct flag {
	const char *name; /* without the leading "--" */
	const char *key;  /* section.key it sets; NULL: handled here */
	enum kind kind;
	int bench_only;   /* not configuration: only `bench` takes it */
};

/* Every flag of FlexGen's flex_opt.py (add_parser_arguments). */
static const struct flag flags[] = {
	{ "model", NULL, K_VALUE, 0 },
	{ "path", NULL, K_VALUE, 0 },
	{ "offload-dir", "tier.disk.dir", K_VALUE, 0 },
	{ "prompt-len", "bench.prompt_len", K_VALUE, 0 },
	{ "gen-len", "bench.gen_len", K_VALUE, 0 },
	{ "cut-gen-len", "bench.cut_gen_len", K_VALUE, 0 },
	{ "debug-mode", NULL, K_VALUE, 1 },
	{ "gpu-batch-size", "policy.gpu_batch_size", K_VALUE, 0 },
	{ "num-gpu-batches", "policy.num_gpu_batches", K_VALUE, 0 },
	{ "percent", "policy.percent", K_PERCENT, 0 },
	{ "sep-layer", "policy.sep_layer", K_BOOL, 0 },
	{ "pin-weight", "policy.pin_weight", K_BOOL, 0 },
	{ "cpu-cache-compute", "policy.cpu_cache_compute", K_SWITCH, 0 },
	{ "attn-sparsity", "policy.attn_sparsity", K_VALUE, 0 },
	{ "compress-weight", "policy.compress_weight", K_SWITCH, 0 },
	{ "compress-cache", "policy.compress_cache", K_SWITCH, 0 },
	{ "log-file", NULL, K_VALUE, 1 },
	{ "no-log", NULL, K_SWITCH, 1 },
	{ "verbose", NULL, K_VERBOSE, 1 },
	{ "overlap", "policy.overlap", K_BOOL, 0 },
	{ NULL, NULL, 0, 0 },
};

#define CLIP 40 /* bytes of user text quoted in a message */

/* "%.*s" arguments and the ellipsis that clip s to CLIP bytes. */
#define CLIPPED(s) (strlen(s) > CLIP ? CLIP : (int)strlen(s)), (s), (strlen(s) > CLIP ? "..." : "")

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A string made of the pieces, sized from them. */
static char *concat(const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
	char *s = malloc(la + lb + lc + 1);

	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb);
		memcpy(s + la + lb, c, lc + 1);
	}
	return s;
}

/* "~" and "~/..." as FlexGen's os.path.expanduser reads them. */
static char *expand_home(const char *path)
{
	const char *home = getenv("HOME");

	if (path[0] == '~' && (path[1] == '\0' || path[1] == '/') && home && *home)
		return concat(home, path + 1, "");
	return strdup(path);
}

/* FlexGen's str2bool, any case; fgcore's on/off too. 1, 0, or -1: not a bool. */
static int parse_bool(const char *s)
{
	static const char *const yes[] = { "yes", "true", "t", "y", "1", "on", NULL };
	static const char *const no[] = { "no", "false", "f", "n", "0", "off", NULL };

	for (int i = 0; yes[i]; i++)
		if (!strcasecmp(s, yes[i]))
			return 1;
	for (int i = 0; no[i]; i++)
		if (!strcasecmp(s, no[i]))
			return 0;
	return -1;
}

/* argparse's negative-number pattern: -5, -.5, -1.5 */
static int is_negative_number(const char *s)
{
	int digits = 0, dot = 0;

	if (*s++ != '-')
		return 0;
	for (; *s; s++) {
		if (isdigit((unsigned char)*s))
			digits++;
		else if (*s == '.' && !dot)
			dot = 1;
		else
			return 0;
	}
	return digits > 0;
}

/* Whether argparse would read s as an option rather than as a value. */
static int looks_like_option(const char *s)
{
	return s[0] == '-' && s[1] != '\0' && !is_negative_number(s) && !strchr(s, ' ');
}

/* An integer in [lo, hi], digits only (an optional sign first); no overflow
 * whatever its length. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
	int neg = 0;
	long v = 0;

	if (*s == '+' || *s == '-')
		neg = *s++ == '-';
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (!isdigit((unsigned char)*s))
			return -1;
		if (v > (hi > -lo ? hi : -lo))
			return -1; /* already out of range: stop before it can overflow */
		v = v * 10 + (*s - '0');
	}
	v = neg ? -v : v;
	if (v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int push(struct fg_flexgen_flags *ff, const char *key, const char *value, const char *where)
{
	char **s = realloc(ff->sets, (ff->n + 1) * sizeof(*s));

	if (!s)
		return -ENOMEM;
	ff->sets = s;
	char **w = realloc(ff->wheres, (ff->n + 1) * sizeof(*w));
	if (!w)
		return -ENOMEM;
	ff->wheres = w;
	ff->sets[ff->n] = concat(key, "=", value);
	ff->wheres[ff->n] = strdup(where);
	if (!ff->sets[ff->n] || !ff->wheres[ff->n]) {
		free(ff->sets[ff->n]);
		free(ff->wheres[ff->n]);
		return -ENOMEM;
	}
	ff->n++;
	return 0;
}

static int replace(char **field, const char *value)
{
	char *s = strdup(value);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

/* What an option name resolved to. */
struct match {
	const struct flag *flag;    /* FlexGen's */
	const struct option *host;  /* fgcore's own (global or the command's) */
};

static int name_is(const char *full, const char *name, size_t len)
{
	return strlen(full) == len && !strncmp(full, name, len);
}

/* argparse's rule: an exact name wins, else a unique prefix among all the
 * parser's options; several prefixes are an error naming them.  fgcore's own
 * --verbose and FlexGen's share a name: both are set then. */
static int resolve(const char *name, size_t len, const struct option *host, int prefixes,
		   struct match *m, char *err, size_t errlen)
{
	char list[512] = "";
	size_t used = 0;
	int n = 0;

	memset(m, 0, sizeof(*m));
	for (int exact = 1; exact >= 0 && !m->flag && !m->host; exact--) {
		if (!exact && (!prefixes || len == 0))
			break;
		for (const struct flag *f = flags; f->name; f++)
			if (exact ? name_is(f->name, name, len) : !strncmp(f->name, name, len)) {
				m->flag = f;
				n++;
				if (used < sizeof(list))
					used += (size_t)snprintf(list + used, sizeof(list) - used,
								 "%s--%s", used ? ", " : "", f->name);
			}
		for (const struct option *o = host; o && o->name; o++)
			if (exact ? name_is(o->name, name, len) : !strncmp(o->name, name, len)) {
				m->host = o;
				if (m->flag && !strcmp(m->flag->name, o->name))
					continue; /* the same name: one candidate */
				n++;
				if (used < sizeof(list))
					used += (size_t)snprintf(list + used, sizeof(list) - used,
								 "%s--%s", used ? ", " : "", o->name);
			}
	}
	if (m->flag && m->host && !prefixes && len == strlen(m->host->name))
		m->flag = NULL; /* a command's own option of that name wins */
	if (n > 1) {
		memset(m, 0, sizeof(*m));
		return fail(err, errlen, "ambiguous option: --%.*s%s could match %s",
			    len > CLIP ? CLIP : (int)len, name, len > CLIP ? "..." : "", list);
	}
	return 0;
}

/* --percent: six integers 0..100, as separate arguments or, with "=", in one
 * argument separated by spaces or commas. */
static int take_percent(struct fg_flexgen_flags *ff, const char *explicit, int argc, char **argv,
			int *i, char *err, size_t errlen)
{
	const char *v[6];
	char *copy = NULL, *tok, *save;
	int n = 0, rc;

	if (explicit) {
		copy = strdup(explicit);
		if (!copy)
			return -ENOMEM;
		for (tok = strtok_r(copy, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
			if (n == 6) {
				free(copy);
				return fail(err, errlen, "--percent takes six integers (wg wc cg cc hg "
					    "hc), got more: see fgcore(1), FLEXGEN FLAGS");
			}
			v[n++] = tok;
		}
	} else {
		while (n < 6 && *i + 1 < argc && !looks_like_option(argv[*i + 1]))
			v[n++] = argv[++*i];
	}
	if (n < 6) {
		free(copy);
		return fail(err, errlen, "--percent needs six integers (wg wc cg cc hg hc), got %d: "
			    "see fgcore(1), FLEXGEN FLAGS", n);
	}
	size_t len = 1;
	for (int k = 0; k < 6; k++) {
		long x;
		if (parse_int(v[k], 0, 100, &x)) {
			rc = fail(err, errlen, "--percent: '%.*s%s' is not an integer 0..100 (six "
				  "percentages: wg wc cg cc hg hc)", CLIPPED(v[k]));
			free(copy);
			return rc;
		}
		len += strlen(v[k]) + 1;
	}
	char *joined = malloc(len);
	if (!joined) {
		free(copy);
		return -ENOMEM;
	}
	joined[0] = '\0';
	for (int k = 0; k < 6; k++) {
		strcat(joined, v[k]); /* sized above */
		if (k < 5)
			strcat(joined, " ");
	}
	char *where = concat("--percent ", joined, "");
	rc = where ? push(ff, "policy.percent", joined, where) : -ENOMEM;
	free(where);
	free(joined);
	free(copy);
	return rc;
}

/* A flag that takes one value: check it and record what it means. */
static int take_value(struct fg_flexgen_flags *ff, const struct flag *f, const char *v, char *err,
		      size_t errlen)
{
	char where[128];
	char *s = NULL;
	int rc = 0;

	snprintf(where, sizeof(where), "--%s %.*s%s", f->name, CLIPPED(v));
	if (*v == '\0')
		return fail(err, errlen, "--%s: the value is empty: see fgcore(1), FLEXGEN FLAGS",
			    f->name);
	if (!strcmp(f->name, "model")) {
		const char *slash = strrchr(v, '/');
		if (!(slash ? slash + 1 : v)[0])
			return fail(err, errlen, "--model %.*s%s: no model name after the '/': use "
				    "e.g. facebook/opt-1.3b", CLIPPED(v));
		return replace(&ff->model, v);
	}
	if (!strcmp(f->name, "path"))
		return replace(&ff->path, v); /* resolved with --model at the end */
	if (!strcmp(f->name, "log-file"))
		return replace(&ff->log_file, v);
	if (!strcmp(f->name, "debug-mode")) {
		if (!strcmp(v, "fewer_batch"))
			ff->debug_mode = FG_DEBUG_FEWER_BATCH;
		else if (!strcmp(v, "breakdown"))
			ff->debug_mode = FG_DEBUG_BREAKDOWN;
		else
			return fail(err, errlen, "--debug-mode: invalid choice '%.*s%s' (choose from "
				    "'fewer_batch', 'breakdown')", CLIPPED(v));
		return 0;
	}
	if (!strcmp(f->name, "attn-sparsity")) {
		char *end;
		double x = strtod(v, &end);
		if (*end || end == v || !isfinite(x) || x <= 0)
			return fail(err, errlen, "--attn-sparsity %.*s%s: expected a number in (0, 1]",
				    CLIPPED(v));
		if (x < 1)
			return fail(err, errlen, "--attn-sparsity %.*s%s: FlexGen's top-k sparse decode "
				    "attention is not implemented in fgcore; use 1 (dense attention)",
				    CLIPPED(v));
		return push(ff, f->key, "1", where); /* above 1 keeps every score: dense */
	}
	if (!strcmp(f->name, "offload-dir")) {
		s = expand_home(v);
		if (!s || replace(&ff->offload_dir, s)) {
			free(s);
			return -ENOMEM;
		}
		rc = push(ff, f->key, s, where);
		free(s);
		return rc;
	}
	return push(ff, f->key, v, where); /* integers: the configuration checks them */
}

/* One FlexGen flag at argv[*i]; `explicit` is the text after '=' or NULL. */
static int take_flag(struct fg_flexgen_flags *ff, const struct flag *f, const char *explicit,
		     int argc, char **argv, int *i, char *err, size_t errlen)
{
	const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
	char where[64];
	int b;

	snprintf(where, sizeof(where), "--%s", f->name);

	ff->given |= 1ull << (f - flags);
	if (f->bench_only && !ff->bench_only)
		ff->bench_only = f->name;
	switch (f->kind) {
	case K_SWITCH:
		if (explicit)
			return fail(err, errlen, "--%s takes no value (got '%.*s%s')", f->name,
				    CLIPPED(explicit));
		if (!strcmp(f->name, "no-log")) {
			ff->no_log = 1;
			return 0;
		}
		return push(ff, f->key, "true", where);
	case K_BOOL:
		if (explicit) {
			if ((b = parse_bool(explicit)) < 0)
				return fail(err, errlen, "--%s %.*s%s: a boolean value is expected "
					    "(true/false, yes/no, 1/0)", f->name, CLIPPED(explicit));
		} else if (next && (b = parse_bool(next)) >= 0) {
			++*i;
		} else {
			b = 1; /* FlexGen's const=True */
		}
		return push(ff, f->key, b ? "true" : "false", where);
	case K_PERCENT:
		return take_percent(ff, explicit, argc, argv, i, err, errlen);
	case K_VERBOSE: {
		const char *v = explicit;
		long x;
		if (!v && next && !looks_like_option(next)) {
			v = next;
			++*i;
		}
		if (!v)
			return fail(err, errlen, "--verbose needs a number (FlexGen's verbosity 0, 1 "
				    "or 2); fgcore's own -v goes before the command");
		if (parse_int(v, -1000000, 1000000, &x))
			return fail(err, errlen, "--verbose %.*s%s: expected an integer", CLIPPED(v));
		ff->verbose = x < 0 ? 0 : (int)x;
		return 0;
	}
	case K_VALUE:
		if (!explicit) {
			if (!next || looks_like_option(next))
				return fail(err, errlen, "--%s needs a value: see fgcore(1), FLEXGEN "
					    "FLAGS", f->name);
			explicit = next;
			++*i;
		}
		return take_value(ff, f, explicit, err, errlen);
	}
	return 0;
}

/* fgcore's own --verbose takes no value; FlexGen's takes a number. */
static int verbose_is_flexgen(const char *explicit, const char *next)
{
	long x;

	return explicit || (next && parse_int(next, -1000000, 1000000, &x) == 0);
}

/* --model and --path into model.path: _DUMMY_ is generated weights, else the
 * folder holding FlexGen's converted <name>-np folder. */
static int resolve_model(struct fg_flexgen_flags *ff)
{
	char *value = NULL;
	int rc;

	if (!ff->path && !ff->model)
		return 0;
	const char *name = ff->model ? ff->model : "facebook/opt-6.7b"; /* FlexGen's default */
	const char *slash = strrchr(name, '/');
	const char *base = slash ? slash + 1 : name;
	const char *dir = ff->path ? ff->path : "~/opt_weights"; /* FlexGen's default */
	if (!strcmp(dir, "_DUMMY_")) {
		value = concat("dummy:", base, "");
	} else {
		char *home = expand_home(dir);
		char *folder = home ? concat(home, "/", base) : NULL;
		value = folder ? concat(folder, "-np", "") : NULL;
		free(home);
		free(folder);
	}
	if (!value)
		return -ENOMEM;
	rc = push(ff, "model.path", value,
		  ff->path && ff->model ? "--model and --path" : ff->path ? "--path" : "--model");
	free(value);
	return rc;
}

int fg_flexgen_flags_take(struct fg_flexgen_flags *ff, const struct fg_flexgen_scope *scope,
			  int *argc, char **argv, char *err, size_t errlen)
{
	enum { BEFORE, LOCAL, OTHER, DONE } state = BEFORE;
	const struct option *other = NULL; /* OTHER: that command's options, if known */
	int out = 1, rc = 0;

	memset(ff, 0, sizeof(*ff));
	ff->verbose = -1;
	for (int i = 1; i < *argc && !rc; i++) {
		char *a = argv[i];
		const struct option *host = state == BEFORE ? scope->global
					  : state == LOCAL ? scope->local : other;

		if (state == DONE || a[0] != '-' || a[1] == '\0') {
			argv[out++] = a; /* a value or an operand */
			if (state == BEFORE && a[0] != '-') {
				state = scope->command && !strcmp(a, scope->command) ? LOCAL : OTHER;
				for (const struct fg_flexgen_command *c = scope->others;
				     state == OTHER && c && c->name; c++)
					if (!strcmp(a, c->name))
						other = c->opts;
			}
			continue;
		}
		if (!strcmp(a, "--")) {
			argv[out++] = a;
			state = DONE;
			continue;
		}
		if (a[1] != '-') {
			/* short options: only fgcore's own, some of which take a value */
			argv[out++] = a;
			if (state != BEFORE)
				continue;
			for (const char *c = a + 1; *c; c++)
				if (scope->global_short_arg && strchr(scope->global_short_arg, *c)) {
					if (c[1] == '\0' && i + 1 < *argc)
						argv[out++] = argv[++i];
					break;
				}
			continue;
		}
		const char *name = a + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		struct match m;
		if ((rc = resolve(name, len, host, state != OTHER, &m, err, errlen)))
			break;
		const char *next = i + 1 < *argc ? argv[i + 1] : NULL;
		if (m.flag && m.host && m.flag->kind == K_VERBOSE &&
		    !verbose_is_flexgen(eq ? eq + 1 : NULL, next))
			m.flag = NULL; /* fgcore's -v spelled --verbose */
		if (!m.flag) {
			argv[out++] = a; /* fgcore's own option, or unknown: its parser says */
			if (m.host && m.host->has_arg == required_argument && !eq && next)
				argv[out++] = argv[++i];
			continue;
		}
		rc = take_flag(ff, m.flag, eq ? eq + 1 : NULL, *argc, argv, &i, err, errlen);
	}
	if (!rc)
		rc = resolve_model(ff);
	if (!rc && ff->debug_mode == FG_DEBUG_BREAKDOWN)
		rc = push(ff, "policy.overlap", "false", "--debug-mode breakdown (no overlap)");
	if (rc) {
		if (rc == -ENOMEM)
			snprintf(err, errlen, "out of memory");
		fg_flexgen_flags_free(ff);
		return rc;
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}

int fg_flexgen_flags_prepare(const struct fg_flexgen_flags *ff, char *err, size_t errlen)
{
	struct stat st;
	char *p;

	if (!ff->offload_dir)
		return 0;
	p = strdup(ff->offload_dir);
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* each parent, then the folder itself (FlexGen's os.makedirs) */
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST) {
			int e = errno;
			snprintf(err, errlen, "--offload-dir %.*s%s: cannot create %.*s%s: %s; give a "
				 "folder you can write", CLIPPED(ff->offload_dir), CLIPPED(p),
				 strerror(e));
			free(p);
			return -e;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	if (stat(ff->offload_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "--offload-dir %.*s%s: not a folder; give a folder you can "
			 "write", CLIPPED(ff->offload_dir));
		return -ENOTDIR;
	}
	return 0;
}

int fg_flexgen_flags_given(const struct fg_flexgen_flags *ff, const char *name)
{
	if (name[0] == '-' && name[1] == '-')
		name += 2;
	for (const struct flag *f = flags; f->name; f++)
		if (!strcmp(f->name, name))
			return !!(ff->given & (1ull << (f - flags)));
	return 0;
}

void fg_flexgen_flags_free(struct fg_flexgen_flags *ff)
{
	for (size_t i = 0; i < ff->n; i++) {
		free(ff->sets[i]);
		free(ff->wheres[i]);
	}
	free(ff->sets);
	free(ff->wheres);
	free(ff->log_file);
	free(ff->model);
	free(ff->path);
	free(ff->offload_dir);
	memset(ff, 0, sizeof(*ff));
	ff->verbose = -1;
}
