/* core/plugin/loader.c - find plugins in the search path, dlopen them and
 * validate everything they declare before any of their code runs. */
#define _GNU_SOURCE /* dladdr1 */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fgcore/codec.h>
#include <fgcore/compute.h>
#include <fgcore/storage.h>
#include <fgcore/transport.h>
#include "core/plugin/elf_check.h"
#include "core/plugin/loader.h"
#include "core/util/fileio.h"
#include "core/util/error.h"
#include "core/util/parse.h"

#ifndef FG_PLUGIN_DIR
#define FG_PLUGIN_DIR "/usr/local/lib/fgcore"
#endif

/* A plugin that still declares FG_ABI_VERSION (every one did before the kinds'
 * minors split) must load as a plugin of its kind: no kind falls behind it. */
_Static_assert(FG_STORAGE_ABI_MINOR >= FG_ABI_MINOR && FG_COMPUTE_ABI_MINOR >= FG_ABI_MINOR &&
		       FG_CODEC_ABI_MINOR >= FG_ABI_MINOR && FG_TRANSPORT_ABI_MINOR >= FG_ABI_MINOR,
	       "a kind's ABI minor is below the shared FG_ABI_MINOR (fgcore/plugin.h)");

#define FG_PLUGIN_NAME_MAX 64
#define FG_OPTIONS_MAX 256		/* entries of an options table, a sanity bound */
#define FG_OPTS_SIZE_MAX (1u << 20)	/* bytes of an options struct, a sanity bound */

const char *fg_plugin_kind_name(uint32_t kind)
{
	switch (kind) {
	case FG_PLUGIN_STORAGE:
		return "storage";
	case FG_PLUGIN_COMPUTE:
		return "compute";
	case FG_PLUGIN_CODEC:
		return "codec";
	case FG_PLUGIN_TRANSPORT:
		return "transport";
	default:
		return "?";
	}
}

uint32_t fg_plugin_kind_abi(uint32_t kind)
{
	switch (kind) {
	case FG_PLUGIN_STORAGE:
		return FG_STORAGE_ABI_VERSION;
	case FG_PLUGIN_COMPUTE:
		return FG_COMPUTE_ABI_VERSION;
	case FG_PLUGIN_CODEC:
		return FG_CODEC_ABI_VERSION;
	case FG_PLUGIN_TRANSPORT:
		return FG_TRANSPORT_ABI_VERSION;
	default:
		return 0;
	}
}

const char *fg_plugin_abi_text(char *buf, size_t n)
{
	static const uint32_t kinds[] = { FG_PLUGIN_STORAGE, FG_PLUGIN_COMPUTE, FG_PLUGIN_CODEC,
					  FG_PLUGIN_TRANSPORT };
	size_t len = 0;

	if (n == 0)
		return buf;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && len < n; i++) {
		uint32_t v = fg_plugin_kind_abi(kinds[i]);
		int w = snprintf(buf + len, n - len, "%s%s %u.%u", i ? ", " : "",
				 fg_plugin_kind_name(kinds[i]), FG_ABI_MAJOR_OF(v),
				 FG_ABI_MINOR_OF(v));

		if (w < 0)
			break;
		len += (size_t)w;
	}
	return buf;
}

int fg_plugin_check_minor(const char *path, uint32_t kind, uint32_t abi, uint32_t host)
{
	const char *k = fg_plugin_kind_name(kind);

	if (FG_ABI_MINOR_OF(abi) <= FG_ABI_MINOR_OF(host))
		return 0;
	FG_ERR("%s: %s plugin built for %s ABI %u.%u, newer than this fgcore's %s ABI %u.%u: "
	       "upgrade fgcore or rebuild the plugin against this fgcore's headers", path, k, k,
	       FG_ABI_MAJOR_OF(abi), FG_ABI_MINOR_OF(abi), k, FG_ABI_MAJOR_OF(host),
	       FG_ABI_MINOR_OF(host));
	return -ENOTSUP;
}

const char *fg_option_type_name(enum fg_option_type t)
{
	switch (t) {
	case FG_OPT_BOOL:
		return "bool";
	case FG_OPT_INT:
		return "int";
	case FG_OPT_SIZE:
		return "size";
	case FG_OPT_STRING:
		return "string";
	case FG_OPT_DOUBLE:
		return "double";
	default:
		return "?";
	}
}

static int fg_key_valid(const char *s, size_t max)
{
	size_t n = 0;

	if (s == NULL || *s == '\0')
		return 0;
	for (; s[n]; n++) {
		char ch = s[n];

		if (n + 1 >= max)
			return 0;
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'))
			return 0;
	}
	return 1;
}

int fg_plugin_name_valid(const char *name)
{
	return fg_key_valid(name, FG_PLUGIN_NAME_MAX);
}

/* ---- search path --------------------------------------------------------- */

/* Call cb for every directory of the search path; stops at cb != 0. */
static int fg_each_dir(int (*cb)(const char *dir, void *user), void *user)
{
	const char *env = getenv("FGCORE_PLUGIN_PATH");
	int r = 0;

	if (env != NULL && *env != '\0') {
		char *copy = strdup(env);
		char *save = NULL;

		if (copy == NULL) {
			FG_ERR("FGCORE_PLUGIN_PATH: out of memory");
			return -ENOMEM;
		}
		/* strtok_r skips empty entries ("a::b", a trailing ':'). */
		for (char *d = strtok_r(copy, ":", &save); d && r == 0; d = strtok_r(NULL, ":", &save))
			r = cb(d, user);
		free(copy);
		if (r != 0)
			return r;
	}
	return cb(FG_PLUGIN_DIR, user);
}

struct fg_path_buf {
	char *buf;
	size_t n, len;
};

static int fg_path_append(const char *dir, void *user)
{
	struct fg_path_buf *b = user;
	int w;

	if (b->len >= b->n)
		return 0;
	w = snprintf(b->buf + b->len, b->n - b->len, "%s%s", b->len ? ":" : "", dir);
	if (w > 0)
		b->len += (size_t)w;
	return 0;
}

void fg_plugin_search_path(char *buf, size_t n)
{
	struct fg_path_buf b = { buf, n, 0 };

	if (n == 0)
		return;
	buf[0] = '\0';
	fg_each_dir(fg_path_append, &b);
}

/* ---- validation ---------------------------------------------------------- */

/* Name of the first required hook that is NULL, or NULL when all are there. */
static const char *fg_storage_missing(const struct fg_storage_ops *o, uint32_t abi)
{
	(void)abi; /* every member is from ABI 1.0 */
	if (!o->open)
		return "open";
	if (!o->close)
		return "close";
	if (!o->alloc)
		return "alloc";
	if (!o->free)
		return "free";
	if (!o->read)
		return "read";
	if (!o->write)
		return "write";
	if (o->submit && !o->reap)
		return "reap";
	return NULL;
}

static const char *fg_compute_missing(const struct fg_compute_ops *o, uint32_t abi)
{
	if (!o->init)
		return "init";
	if (!o->fini)
		return "fini";
	if (!o->info)
		return "info";
	if (!o->embed)
		return "embed";
	if (!o->layer_norm)
		return "layer_norm";
	if (!o->linear)
		return "linear";
	if (!o->attention_prefill)
		return "attention_prefill";
	if (!o->attention_decode)
		return "attention_decode";
	if (!o->kv_append)
		return "kv_append";
	/* Members of minor 1: a 1.0 plugin's table ends before them, so they are
	 * read only from a plugin built for 1.1 or later. */
	if (abi >= FG_ABI(1, 1)) {
		if (!o->rope)
			return "rope";
		if (!o->supports)
			return "supports";
	}
	return NULL;
}

/* The stream and event hooks come as a set: none (synchronous) or all seven. */
static int fg_compute_streams_ok(const struct fg_compute_ops *o)
{
	int n = !!o->stream_create + !!o->stream_destroy + !!o->stream_sync + !!o->event_create +
		!!o->event_destroy + !!o->event_record + !!o->stream_wait;

	return n == 0 || n == 7;
}

/* The timers (minor 2) come as a set too; a 1.1 plugin's table has none. */
static int fg_compute_timers_ok(const struct fg_compute_ops *o, uint32_t abi)
{
	int n = abi >= FG_ABI(1, 2) ? !!o->timer_create + !!o->timer_destroy + !!o->timer_record +
					      !!o->timer_elapsed
				    : 0;

	return n == 0 || n == 4;
}

/* The graph hooks (minor 5) come as a pair, and only with streams: a graph
 * is recorded from one. */
static int fg_compute_graphs_ok(const struct fg_compute_ops *o, uint32_t abi)
{
	int n = abi >= FG_ABI(1, 5) ? !!o->graph_begin + !!o->graph_end : 0;

	return n == 0 || (n == 2 && o->stream_create);
}

static const char *fg_codec_missing(const struct fg_codec_ops *o, uint32_t abi)
{
	(void)abi;
	if (!o->encoded_size)
		return "encoded_size";
	if (!o->encode_f32)
		return "encode_f32";
	if (!o->decode_f32)
		return "decode_f32";
	return NULL;
}

static const char *fg_transport_missing(const struct fg_transport_ops *o)
{
	const char *names[] = { "open", "close", "isend", "irecv", "test", "cancel", "abort" };
	const void *hooks[] = { (const void *)o->open, (const void *)o->close,
				(const void *)o->isend, (const void *)o->irecv,
				(const void *)o->test, (const void *)o->cancel,
				(const void *)o->abort };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!hooks[i])
			return names[i];
	return NULL;
}

static size_t fg_option_size(enum fg_option_type t, size_t *align)
{
	switch (t) {
	case FG_OPT_BOOL:
		*align = alignof(int);
		return sizeof(int);
	case FG_OPT_INT:
		*align = alignof(int64_t);
		return sizeof(int64_t);
	case FG_OPT_SIZE:
		*align = alignof(uint64_t);
		return sizeof(uint64_t);
	case FG_OPT_STRING:
		*align = 1;
		return FG_OPT_STRING_MAX;
	case FG_OPT_DOUBLE:
		*align = alignof(double);
		return sizeof(double);
	default:
		*align = 1;
		return 0;
	}
}

/* The options table, read as data only: keys, types, member bounds, defaults. */
static int fg_check_options(const char *path, const struct fg_plugin *p)
{
	const struct fg_option *opt = p->options;
	size_t i;

	if (p->opts_size > FG_OPTS_SIZE_MAX) {
		FG_ERR("%s: options struct of %zu bytes (opts_size) is larger than the %u allowed: "
		       "fix the plugin's opts_size", path, p->opts_size, FG_OPTS_SIZE_MAX);
		return -EINVAL;
	}
	if (opt == NULL)
		return 0;
	for (i = 0; i < FG_OPTIONS_MAX && opt[i].key != NULL; i++) {
		const struct fg_option *o = &opt[i];
		size_t align, size = fg_option_size(o->type, &align);
		char why[256];

		if (!fg_key_valid(o->key, FG_PLUGIN_NAME_MAX)) {
			FG_ERR("%s: option %zu has the key '%.64s': option keys use only a-z, 0-9 "
			       "and _ (at most %d characters)", path, i, o->key,
			       FG_PLUGIN_NAME_MAX - 1);
			return -EINVAL;
		}
		if (strcmp(o->key, "plugin") == 0 ||
		    (p->kind == FG_PLUGIN_STORAGE && strcmp(o->key, "capacity") == 0)) {
			FG_ERR("%s: option '%s' clashes with the core's key of the same name in "
			       "the plugin's section: rename the option", path, o->key);
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(opt[j].key, o->key) == 0) {
				FG_ERR("%s: option '%s' is declared twice in the options table: "
				       "keep one", path, o->key);
				return -EINVAL;
			}
		}
		if (size == 0) {
			FG_ERR("%s: option '%s' has the unknown type %d: use FG_OPT_BOOL, INT, SIZE, "
			       "STRING or DOUBLE", path, o->key, (int)o->type);
			return -EINVAL;
		}
		if (o->offset > p->opts_size || size > p->opts_size - o->offset) {
			FG_ERR("%s: option '%s' (%s, %zu bytes at offset %zu) lies outside the "
			       "%zu-byte options struct (opts_size): fix the table's offset or "
			       "opts_size", path, o->key, fg_option_type_name(o->type), size,
			       o->offset, p->opts_size);
			return -EINVAL;
		}
		if (o->offset % align != 0) {
			FG_ERR("%s: option '%s' (%s) at offset %zu is not aligned to %zu bytes: use "
			       "offsetof() of a member of the right type", path, o->key,
			       fg_option_type_name(o->type), o->offset, align);
			return -EINVAL;
		}
		if ((o->type == FG_OPT_INT || o->type == FG_OPT_DOUBLE) && o->min > o->max) {
			FG_ERR("%s: option '%s' has min %" PRId64 " > max %" PRId64 ": fix the "
			       "range", path, o->key, o->min, o->max);
			return -EINVAL;
		}
		if (o->def != NULL) {
			union {
				int b;
				int64_t i;
				uint64_t s;
				double d;
				char str[FG_OPT_STRING_MAX];
			} scratch;
			struct fg_option at0 = *o;

			at0.offset = 0;
			if (fg_plugin_opt_parse(&at0, &scratch, o->def, why, sizeof(why)) != 0) {
				FG_ERR("%s: option '%s' has the default '%.64s': %s", path, o->key,
				       o->def, why);
				return -EINVAL;
			}
		}
	}
	if (i == FG_OPTIONS_MAX) {
		FG_ERR("%s: the options table has more than %d entries or lacks its terminating "
		       "{ .key = NULL } entry", path, FG_OPTIONS_MAX - 1);
		return -EINVAL;
	}
	return 0;
}

static int fg_check_plugin(const char *path, const struct fg_plugin *p, uint32_t want_kind,
			   const char *want_name)
{
	uint32_t major = FG_ABI_MAJOR_OF(p->abi_version);
	uint32_t minor = FG_ABI_MINOR_OF(p->abi_version);
	const char *base, *missing = NULL;
	size_t base_len;
	char kinds[128];
	int r;

	/* Another major may lay out even `kind` differently: only the major is read. */
	if (major != FG_ABI_MAJOR) {
		FG_ERR("%s: built for ABI %u.%u, this fgcore speaks ABI %u (%s): rebuild the "
		       "plugin against this fgcore's headers", path, major, minor, FG_ABI_MAJOR,
		       fg_plugin_abi_text(kinds, sizeof(kinds)));
		return -ENOTSUP;
	}
	if (p->kind != FG_PLUGIN_STORAGE && p->kind != FG_PLUGIN_COMPUTE &&
	    p->kind != FG_PLUGIN_CODEC && p->kind != FG_PLUGIN_TRANSPORT) {
		FG_ERR("%s: unknown plugin kind %u: a plugin is of kind %d (storage), %d (compute), "
		       "%d (codec) or %d (transport)", path, p->kind, FG_PLUGIN_STORAGE,
		       FG_PLUGIN_COMPUTE, FG_PLUGIN_CODEC, FG_PLUGIN_TRANSPORT);
		return -ENOTSUP;
	}
	/* The minor counts its kind's additions: a compute 1.11 says nothing of storage. */
	r = fg_plugin_check_minor(path, p->kind, p->abi_version, fg_plugin_kind_abi(p->kind));
	if (r != 0)
		return r;
	if (want_kind != 0 && p->kind != want_kind) {
		FG_ERR("%s: is a %s plugin, but a %s plugin is needed here: name a %s plugin "
		       "(`fgcore plugins` lists them)", path, fg_plugin_kind_name(p->kind),
		       fg_plugin_kind_name(want_kind), fg_plugin_kind_name(want_kind));
		return -EINVAL;
	}
	if (p->name == NULL) {
		FG_ERR("%s: the plugin has no name (fg_plugin_entry.name is NULL): set it to the "
		       "file's base name", path);
		return -EINVAL;
	}
	if (!fg_plugin_name_valid(p->name)) {
		FG_ERR("%s: plugin name '%.64s' is not valid: names use only a-z, 0-9 and _ (at "
		       "most %d characters)", path, p->name, FG_PLUGIN_NAME_MAX - 1);
		return -EINVAL;
	}
	if (want_name != NULL) {
		if (strcmp(p->name, want_name) != 0) {
			FG_ERR("%s: the plugin calls itself '%s' but was asked for as '%s': the "
			       "name in fg_plugin_entry must equal the file's base name", path,
			       p->name, want_name);
			return -EINVAL;
		}
	} else {
		base = strrchr(path, '/');
		base = base ? base + 1 : path;
		base_len = strlen(base);
		if (base_len > 3 && strcmp(base + base_len - 3, ".so") == 0)
			base_len -= 3;
		if (strlen(p->name) != base_len || strncmp(p->name, base, base_len) != 0) {
			FG_ERR("%s: the plugin calls itself '%s' but its file is '%s': name the file "
			       "%s.so or fix the name in fg_plugin_entry", path, p->name, base,
			       p->name);
			return -EINVAL;
		}
	}
	if (p->ops == NULL) {
		FG_ERR("%s: the plugin has no ops table (fg_plugin_entry.ops is NULL)", path);
		return -EINVAL;
	}
	switch (p->kind) {
	case FG_PLUGIN_STORAGE: {
		const struct fg_storage_ops *o = p->ops;

		missing = fg_storage_missing(o, p->abi_version);
		if (missing && strcmp(missing, "reap") == 0) {
			FG_ERR("%s: storage plugin has the optional hook 'submit' but not 'reap': "
			       "provide both or neither", path);
			return -EINVAL;
		}
		break;
	}
	case FG_PLUGIN_COMPUTE:
		missing = fg_compute_missing(p->ops, p->abi_version);
		if (missing && (strcmp(missing, "rope") == 0 || strcmp(missing, "supports") == 0)) {
			FG_ERR("%s: compute plugin built for ABI %u.%u lacks the hook '%s', required "
			       "from compute ABI 1.1 on (struct fg_compute_ops): implement it",
			       path, major, minor, missing);
			return -EINVAL;
		}
		if (!missing && !fg_compute_streams_ok(p->ops)) {
			FG_ERR("%s: compute plugin defines some of the stream/event hooks "
			       "(stream_create, stream_destroy, stream_sync, event_create, "
			       "event_destroy, event_record, stream_wait) but not all seven: define "
			       "all of them or none", path);
			return -EINVAL;
		}
		if (!missing && !fg_compute_timers_ok(p->ops, p->abi_version)) {
			FG_ERR("%s: compute plugin defines some of the timer hooks (timer_create, "
			       "timer_destroy, timer_record, timer_elapsed) but not all four: define "
			       "all of them or none", path);
			return -EINVAL;
		}
		if (!missing && !fg_compute_graphs_ok(p->ops, p->abi_version)) {
			FG_ERR("%s: compute plugin defines graph_begin or graph_end without the other, "
			       "or without the stream hooks: define both with streams, or neither",
			       path);
			return -EINVAL;
		}
		break;
	case FG_PLUGIN_CODEC:
		missing = fg_codec_missing(p->ops, p->abi_version);
		break;
	case FG_PLUGIN_TRANSPORT:
		missing = fg_transport_missing(p->ops);
		break;
	}
	if (missing) {
		FG_ERR("%s: %s plugin lacks the required hook '%s' (struct fg_%s_ops): implement "
		       "it", path, fg_plugin_kind_name(p->kind), missing,
		       fg_plugin_kind_name(p->kind));
		return -EINVAL;
	}
	return fg_check_options(path, p);
}

/* ---- opening --------------------------------------------------------------- */

/* A damaged file (truncated: its segments reach past its end) would kill the
 * process with SIGBUS inside dlopen; refuse it first. */
static int fg_plugin_check_elf(const char *path)
{
	char why[256] = "";
	struct stat st;
	int fd, r;

	fd = fg_open_regular(path, &st);
	if (fd < 0)
		return fd == -EINVAL ? -ENOEXEC : fd;
	r = fg_elf_check_fd(fd, (unsigned long long)st.st_size, why, sizeof(why));
	close(fd);
	if (r == 0)
		return 0;
	if (why[0] == '\0')
		snprintf(why, sizeof(why), "cannot read its ELF headers: %s", strerror(-r));
	FG_ERR("%s: not loadable as a plugin: %s", path, why);
	return r == -ENOMEM ? r : -ENOEXEC;
}

static const char *fg_sym_type_name(unsigned type)
{
	switch (type) {
	case STT_NOTYPE:
		return "symbol without a type";
	case STT_FUNC:
		return "function";
	case STT_GNU_IFUNC:
		return "indirect function";
	case STT_SECTION:
		return "section";
	case STT_FILE:
		return "file name";
	case STT_COMMON:
		return "common block";
	case STT_TLS:
		return "thread-local variable";
	default:
		return "symbol of an unknown type";
	}
}

/* The entry is read as a struct fg_plugin: it must be a data object that
 * big, aligned for one.  A plugin that exports a function (or a smaller
 * object) under the name would have its code read as the struct. */
static int fg_plugin_check_entry(const char *path, const void *p)
{
	const ElfW(Sym) *sym = NULL;
	Dl_info info;
	unsigned type;

	if (dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL) {
		FG_ERR("%s: %s lies in no symbol of a loaded object, so not an fgcore plugin: a "
		       "plugin exports `const struct fg_plugin %s` (see fgcore/plugin.h)", path,
		       FG_PLUGIN_ENTRY, FG_PLUGIN_ENTRY);
		return -ENOEXEC;
	}
	type = ELF64_ST_TYPE(sym->st_info);	/* the same in ELF32 */
	if (type != STT_OBJECT) {
		FG_ERR("%s: %s is a %s, not a data object, so not an fgcore plugin: a plugin "
		       "exports `const struct fg_plugin %s` (see fgcore/plugin.h)", path,
		       FG_PLUGIN_ENTRY, fg_sym_type_name(type), FG_PLUGIN_ENTRY);
		return -ENOEXEC;
	}
	if ((uintptr_t)p % alignof(struct fg_plugin) != 0) {
		FG_ERR("%s: %s is at an address not aligned for a struct fg_plugin (to %zu bytes): "
		       "export `const struct fg_plugin %s`, as the C compiler lays it out", path,
		       FG_PLUGIN_ENTRY, alignof(struct fg_plugin), FG_PLUGIN_ENTRY);
		return -ENOEXEC;
	}
	if ((const char *)p < (const char *)info.dli_saddr ||
	    (uint64_t)sym->st_size < (uint64_t)((const char *)p - (const char *)info.dli_saddr) +
					     sizeof(struct fg_plugin)) {
		FG_ERR("%s: %s is a %llu-byte object, smaller than a struct fg_plugin (%zu bytes): "
		       "export `const struct fg_plugin %s` (see fgcore/plugin.h)", path,
		       FG_PLUGIN_ENTRY, (unsigned long long)sym->st_size, sizeof(struct fg_plugin),
		       FG_PLUGIN_ENTRY);
		return -ENOEXEC;
	}
	return 0;
}

int fg_plugin_open_file(const char *path, uint32_t want_kind, const char *want_name,
			struct fg_plugin_handle *out)
{
	char dlpath[PATH_MAX + 2];
	const struct fg_plugin *p;
	struct stat st;
	void *dl;
	int r;

	memset(out, 0, sizeof(*out));
	if (path == NULL || *path == '\0') {
		FG_ERR("plugin path is empty: name a file <dir>/<name>.so");
		return -EINVAL;
	}
	if (strlen(path) >= PATH_MAX) {
		FG_ERR("%.64s...: plugin path longer than %d bytes", path, PATH_MAX - 1);
		return -ENAMETOOLONG;
	}
	if (stat(path, &st) != 0) {
		r = -errno;
		FG_ERR("%s: cannot open the plugin: %s", path, strerror(errno));
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		FG_ERR("%s: not a regular file, so not a plugin (a plugin is a shared object "
		       "<name>.so)", path);
		return -ENOEXEC;
	}
	r = fg_plugin_check_elf(path);
	if (r != 0)
		return r;
	/* Without a '/', dlopen would search the library path instead of the file.
	 * RTLD_NODELETE: a plugin's code stays mapped after dlclose, because the
	 * runtimes plugins bring (CUDA, libstdc++) leave atexit handlers, thread
	 * destructors and allocations behind that point into it. */
	snprintf(dlpath, sizeof(dlpath), "%s%s", strchr(path, '/') ? "" : "./", path);
	dlerror();
	dl = dlopen(dlpath, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (dl == NULL) {
		const char *why = dlerror();

		FG_ERR("%s: not loadable as a plugin (not a shared object for this machine, or a "
		       "library it needs is missing): %s", path, why ? why : "dlopen failed");
		return -ENOEXEC;
	}
	dlerror();
	p = dlsym(dl, FG_PLUGIN_ENTRY);
	if (p == NULL) {
		FG_ERR("%s: no %s symbol, so not an fgcore plugin: a plugin exports "
		       "`const struct fg_plugin %s` (see fgcore/plugin.h)", path, FG_PLUGIN_ENTRY,
		       FG_PLUGIN_ENTRY);
		dlclose(dl);
		return -ENOEXEC;
	}
	r = fg_plugin_check_entry(path, p);
	if (r == 0)
		r = fg_check_plugin(path, p, want_kind, want_name);
	if (r != 0) {
		dlclose(dl);
		return r;
	}
	out->plugin = p;
	out->dl = dl;
	memcpy(out->path, path, strlen(path) + 1);
	return 0;
}

struct fg_find {
	const char *name;
	char path[PATH_MAX];
	int found;
};

static int fg_find_in_dir(const char *dir, void *user)
{
	struct fg_find *f = user;
	struct stat st;
	int w;

	w = snprintf(f->path, sizeof(f->path), "%s/%s.so", dir, f->name);
	if (w < 0 || (size_t)w >= sizeof(f->path))
		return 0;
	if (stat(f->path, &st) == 0) {
		f->found = 1;
		return 1;
	}
	return 0;
}

int fg_plugin_load(const char *name, uint32_t want_kind, struct fg_plugin_handle *out)
{
	struct fg_find f = { .name = name };
	char search[1024];

	memset(out, 0, sizeof(*out));
	if (name == NULL || *name == '\0') {
		FG_ERR("plugin name is empty: name a plugin (`fgcore plugins` lists them)");
		return -EINVAL;
	}
	if (!fg_plugin_name_valid(name)) {
		FG_ERR("plugin name '%.64s' is not valid: names use only a-z, 0-9 and _ (the "
		       "plugin is the file <name>.so in the plugin path)", name);
		return -EINVAL;
	}
	if (fg_each_dir(fg_find_in_dir, &f) < 0)
		return -ENOMEM;
	if (!f.found) {
		fg_plugin_search_path(search, sizeof(search));
		FG_ERR("plugin '%s' not found: no %s.so in %s: install it there or add its "
		       "directory to FGCORE_PLUGIN_PATH (`fgcore plugins` lists the plugins found)",
		       name, name, search);
		return -ENOENT;
	}
	return fg_plugin_open_file(f.path, want_kind, name, out);
}

void fg_plugin_close(struct fg_plugin_handle *h)
{
	if (h == NULL)
		return;
	if (h->dl != NULL)
		dlclose(h->dl);
	memset(h, 0, sizeof(*h));
}

int fg_plugin_probe(const struct fg_plugin_handle *h)
{
	int r;

	if (h->plugin->probe == NULL)
		return 1;
	r = h->plugin->probe(fg_core_host());
	return r > 0 ? r : 0;
}

/* ---- enumeration ----------------------------------------------------------- */

struct fg_each {
	int (*cb)(const char *path, void *user);
	void *user;
	char **seen;
	size_t n_seen, cap_seen;
};

static int fg_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int fg_seen_add(struct fg_each *e, const char *name)
{
	for (size_t i = 0; i < e->n_seen; i++)
		if (strcmp(e->seen[i], name) == 0)
			return 1;
	if (e->n_seen == e->cap_seen) {
		size_t cap = e->cap_seen ? 2 * e->cap_seen : 16;
		char **s = realloc(e->seen, cap * sizeof(*s));

		if (s == NULL)
			return -ENOMEM;
		e->seen = s;
		e->cap_seen = cap;
	}
	e->seen[e->n_seen] = strdup(name);
	if (e->seen[e->n_seen] == NULL)
		return -ENOMEM;
	e->n_seen++;
	return 0;
}

static int fg_each_in_dir(const char *dir, void *user)
{
	struct fg_each *e = user;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *d;
	DIR *dp;
	int r = 0;

	dp = opendir(dir);
	if (dp == NULL)
		return 0; /* a missing directory in the path is not an error */
	while ((d = readdir(dp)) != NULL) {
		size_t len = strlen(d->d_name);

		if (d->d_name[0] == '.' || len <= 3 || strcmp(d->d_name + len - 3, ".so") != 0)
			continue;
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			char **s = realloc(names, ncap * sizeof(*s));

			if (s == NULL) {
				r = -ENOMEM;
				break;
			}
			names = s;
			cap = ncap;
		}
		names[n] = strdup(d->d_name);
		if (names[n] == NULL) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(dp);
	if (r == 0 && n > 0)
		qsort(names, n, sizeof(*names), fg_name_cmp);
	for (size_t i = 0; i < n && r == 0; i++) {
		char path[PATH_MAX];
		struct stat st;
		int w, s;

		w = snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (w < 0 || (size_t)w >= sizeof(path))
			continue;
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		s = fg_seen_add(e, names[i]);
		if (s < 0)
			r = s;
		else if (s == 0)
			r = e->cb(path, e->user);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (r == -ENOMEM)
		FG_ERR("%s: out of memory while listing plugins", dir);
	return r;
}

int fg_plugin_foreach(int (*cb)(const char *path, void *user), void *user)
{
	struct fg_each e = { .cb = cb, .user = user };
	int r;

	r = fg_each_dir(fg_each_in_dir, &e);
	for (size_t i = 0; i < e.n_seen; i++)
		free(e.seen[i]);
	free(e.seen);
	return r;
}

/* ---- options --------------------------------------------------------------- */

const struct fg_option *fg_plugin_find_option(const struct fg_plugin *p, const char *key)
{
	if (p->options == NULL || key == NULL)
		return NULL;
	for (const struct fg_option *o = p->options; o->key != NULL; o++)
		if (strcmp(o->key, key) == 0)
			return o;
	return NULL;
}

int fg_plugin_opt_parse(const struct fg_option *o, void *opts, const char *value, char *why,
			size_t n)
{
	char *dst = (char *)opts + o->offset;
	int r = -EINVAL;

	switch (o->type) {
	case FG_OPT_BOOL: {
		int v;

		r = fg_parse_bool(value, &v, why, n);
		if (r == 0)
			memcpy(dst, &v, sizeof(v));
		break;
	}
	case FG_OPT_INT: {
		int64_t v;

		r = fg_parse_int(value, o->min, o->max, &v, why, n);
		if (r == 0)
			memcpy(dst, &v, sizeof(v));
		break;
	}
	case FG_OPT_SIZE: {
		uint64_t v;

		r = fg_parse_size(value, &v, why, n);
		if (r == 0)
			memcpy(dst, &v, sizeof(v));
		break;
	}
	case FG_OPT_STRING:
		r = fg_parse_string(value, FG_OPT_STRING_MAX, why, n);
		if (r == 0) {
			memset(dst, 0, FG_OPT_STRING_MAX);
			memcpy(dst, value, strlen(value));
		}
		break;
	case FG_OPT_DOUBLE: {
		double v;

		r = fg_parse_double(value, o->min != o->max, (double)o->min, (double)o->max, &v,
				    why, n);
		if (r == 0)
			memcpy(dst, &v, sizeof(v));
		break;
	}
	default:
		snprintf(why, n, "the option has the unknown type %d", (int)o->type);
		break;
	}
	return r;
}

const char *fg_plugin_opt_format(const struct fg_option *o, const void *opts, char *buf, size_t n)
{
	const char *src = (const char *)opts + o->offset;

	switch (o->type) {
	case FG_OPT_BOOL: {
		int v;

		memcpy(&v, src, sizeof(v));
		snprintf(buf, n, "%s", v ? "true" : "false");
		break;
	}
	case FG_OPT_INT: {
		int64_t v;

		memcpy(&v, src, sizeof(v));
		snprintf(buf, n, "%" PRId64, v);
		break;
	}
	case FG_OPT_SIZE: {
		uint64_t v;

		memcpy(&v, src, sizeof(v));
		fg_format_size(v, buf, n);
		break;
	}
	case FG_OPT_STRING:
		snprintf(buf, n, "%.*s", FG_OPT_STRING_MAX - 1, src);
		break;
	case FG_OPT_DOUBLE: {
		double v;

		memcpy(&v, src, sizeof(v));
		fg_format_double(v, buf, n);
		break;
	}
	default:
		snprintf(buf, n, "?");
		break;
	}
	return buf;
}

void *fg_plugin_opts_new(const struct fg_plugin *p)
{
	void *opts = calloc(1, p->opts_size ? p->opts_size : 1);
	char why[256];

	if (opts == NULL) {
		FG_ERR("plugin %s: out of memory for its %zu-byte options", p->name, p->opts_size);
		return NULL;
	}
	if (p->options == NULL)
		return opts;
	for (const struct fg_option *o = p->options; o->key != NULL; o++) {
		if (o->def == NULL)
			continue;
		if (fg_plugin_opt_parse(o, opts, o->def, why, sizeof(why)) != 0) {
			FG_ERR("plugin %s: option '%s' has the default '%.64s': %s", p->name, o->key,
			       o->def, why);
			free(opts);
			return NULL;
		}
	}
	return opts;
}

int fg_plugin_opts_set(const struct fg_plugin *p, void *opts, const char *key,
		       const char *value, const char *where)
{
	const struct fg_option *o = fg_plugin_find_option(p, key);
	char why[384];

	if (where == NULL)
		where = p->name;
	if (o == NULL) {
		char known[512] = "";
		size_t len = 0;

		for (const struct fg_option *k = p->options; k && k->key && len < sizeof(known);
		     k++) {
			int w = snprintf(known + len, sizeof(known) - len, "%s%s", len ? ", " : "",
					 k->key);
			if (w > 0)
				len += (size_t)w;
		}
		if (len == 0)
			FG_ERR("%s: unknown key '%.64s': plugin %s has no options", where, key,
			       p->name);
		else
			FG_ERR("%s: unknown key '%.64s' for plugin %s, its options are: %s", where,
			       key, p->name, known);
		return -EINVAL;
	}
	if (fg_plugin_opt_parse(o, opts, value, why, sizeof(why)) != 0) {
		FG_ERR("%s: %s = '%.200s' (option of plugin %s): %s", where, key, value, p->name,
		       why);
		return -EINVAL;
	}
	return 0;
}
