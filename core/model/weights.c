/* core/model/weights.c - open a weight source, validate every tensor, read rows as fp16.
 *
 * Sources: a Hugging Face folder (model.safetensors, or shards listed in
 * model.safetensors.index.json), a FlexGen "-np" folder (one .npy file per
 * tensor) or "dummy:<preset>".  Everything is checked at open; reads use
 * pread so a file that shrinks while open is an -EIO, never a SIGBUS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <fgcore/half.h>

#include "core/model/dummy.h"
#include "core/util/fileio.h"
#include "core/model/npy.h"
#include "core/model/safetensors.h"
#include "core/model/weights.h"
#include "core/util/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weights.c reads little-endian safetensors/npy data in place: port the byte order first"
#endif

#define WT_NAME_MAX 128
/* An index.json lists a few thousand names; anything this big is not one. */
#define WT_INDEX_MAX_BYTES (64u << 20)
/* Elements converted per pass when the file is not fp16. */
#define WT_CHUNK 8192

enum wt_dtype { WT_F16, WT_BF16, WT_F32 };

static const char *const wt_dtype_names[] = { "F16", "BF16", "F32" };

struct wt_file {
	char *path;
	int fd;        /* -1: opened per read (npy folders hold one file per tensor) */
	uint64_t size; /* at open; a different size later means it was replaced */
};

struct wt_slot {
	int64_t file; /* index in files, -1 while not found */
	enum wt_dtype dtype;
	uint64_t offset;
};

struct fg_weights {
	struct fg_model_config cfg;
	int dummy;
	int64_t count;
	struct wt_slot *slot;
	int64_t nfiles, cap_files;
	struct wt_file *files;
};

static char *wt_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	else
		FG_ERR("%s: out of memory", dir);
	return p;
}

static int wt_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Takes ownership of path and fd. */
static int64_t wt_add_file(struct fg_weights *w, char *path, int fd, uint64_t size)
{
	if (w->nfiles == w->cap_files) {
		int64_t cap = w->cap_files ? 2 * w->cap_files : 16;
		struct wt_file *f = realloc(w->files, (size_t)cap * sizeof(*f));

		if (!f) {
			FG_ERR("%s: out of memory", path);
			free(path);
			if (fd >= 0)
				close(fd);
			return -ENOMEM;
		}
		w->files = f;
		w->cap_files = cap;
	}
	w->files[w->nfiles] = (struct wt_file){ .path = path, .fd = fd, .size = size };
	return w->nfiles++;
}

static void wt_shape_str(char *buf, size_t len, int rank, const int64_t *shape)
{
	size_t used = 0;
	int i;

	used += (size_t)snprintf(buf, len, "[");
	for (i = 0; i < rank && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
					 (long long)shape[i]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
}

/* Check that stored tensor `tname` in `file` fits slot idx, then fill the slot. */
static int wt_place(struct fg_weights *w, int64_t idx, int64_t file, const char *fname,
		    const char *tname, const char *dtype, int rank, const int64_t *shape,
		    uint64_t offset)
{
	char want[WT_NAME_MAX], got_s[96], want_s[96];
	int64_t need[2];
	int need_rank, i, d = -1;

	for (i = 0; i < 3; i++)
		if (strcmp(dtype, wt_dtype_names[i]) == 0)
			d = i;
	if (d < 0) {
		FG_ERR("%s: tensor \"%s\" has dtype %s; only F16, BF16 and F32 are supported",
		       fname, tname, dtype);
		return -ENOTSUP;
	}
	if (fg_arch_tensor_info(&w->cfg, idx, want, sizeof(want), &need_rank, &need[0],
				   &need[1]))
		return -EINVAL;
	if (need_rank == 1)
		need[0] = need[1];
	if (rank != need_rank || shape[0] != need[0] || (rank == 2 && shape[1] != need[1])) {
		wt_shape_str(got_s, sizeof(got_s), rank, shape);
		wt_shape_str(want_s, sizeof(want_s), need_rank, need);
		FG_ERR("%s: tensor \"%s\" has shape %s but the config of %s (hidden %lld, ffn %lld, "
		       "vocab %lld, %lld positions) needs %s",
		       fname, tname, got_s, w->cfg.name, (long long)w->cfg.hidden,
		       (long long)w->cfg.ffn, (long long)w->cfg.vocab, (long long)w->cfg.max_pos,
		       want_s);
		return -EINVAL;
	}
	if (w->slot[idx].file >= 0) {
		FG_ERR("%s: tensor \"%s\" is stored twice (another name also maps to \"%s\")",
		       fname, tname, want);
		return -EINVAL;
	}
	w->slot[idx] = (struct wt_slot){ .file = file, .dtype = (enum wt_dtype)d,
					 .offset = offset };
	return 0;
}

static int wt_place_st(struct fg_weights *w, int64_t idx, int64_t file,
		       const struct fg_st_file *st, const struct fg_st_tensor *t)
{
	return wt_place(w, idx, file, st->path, t->name, fg_st_dtype_name(t->dtype), t->rank,
			t->shape, t->offset);
}

/* The first tensor not found, named with where it was looked for. */
static int wt_check_complete(struct fg_weights *w, const char *where)
{
	char name[WT_NAME_MAX];
	int64_t i, r, c;
	int rank;

	for (i = 0; i < w->count; i++) {
		if (w->slot[i].file >= 0)
			continue;
		fg_arch_tensor_info(&w->cfg, i, name, sizeof(name), &rank, &r, &c);
		FG_ERR("%s: tensor \"%s\" is missing (%s has %lld layers)", where, name,
		       w->cfg.name, (long long)w->cfg.layers);
		return -ENOENT;
	}
	return 0;
}

/* Validate an opened shard, keep its descriptor and drop its table. */
static int64_t wt_keep_st(struct fg_weights *w, struct fg_st_file *st)
{
	char *path = strdup(st->path);
	int64_t fi;

	if (!path) {
		FG_ERR("%s: out of memory", st->path);
		return -ENOMEM;
	}
	fi = wt_add_file(w, path, st->fd, st->size);
	if (fi >= 0)
		st->fd = -1;
	return fi;
}

static int wt_open_single(struct fg_weights *w, const char *path)
{
	struct fg_st_file *st;
	int64_t fi;
	size_t i;
	int rc;

	rc = fg_st_open(path, &st);
	if (rc)
		return rc;
	fi = wt_keep_st(w, st);
	if (fi < 0) {
		fg_st_close(st);
		return (int)fi;
	}
	for (i = 0; i < st->count; i++) {
		int64_t idx = fg_arch_tensor_index(&w->cfg, st->t[i].name);

		if (idx < 0)
			continue; /* lm_head (tied) and anything the model does not use */
		rc = wt_place_st(w, idx, fi, st, &st->t[i]);
		if (rc)
			break;
	}
	fg_st_close(st);
	return rc ? rc : wt_check_complete(w, path);
}

/* A shard name must stay inside the folder. */
static int wt_plain_name(const char *s)
{
	return *s && !strchr(s, '/') && !strstr(s, "..");
}

static int wt_open_sharded(struct fg_weights *w, const char *dir, const char *index_path)
{
	const char **shard_of = NULL, **key_of = NULL;
	const char *key, **shards = NULL;
	size_t nshards = 0, s;
	json_t *root = NULL, *map, *v;
	json_error_t jerr;
	char *buf = NULL;
	size_t len = 0;
	int64_t i;
	int rc;

	rc = fg_read_small_file(index_path, WT_INDEX_MAX_BYTES, &buf, &len);
	if (rc)
		return rc;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!root) {
		FG_ERR("%s:%d:%d: not valid JSON: %s", index_path, jerr.line, jerr.column,
		       jerr.text);
		return -EINVAL;
	}
	map = json_object_get(root, "weight_map");
	if (!json_is_object(map)) {
		FG_ERR("%s: \"weight_map\" is missing or not a JSON object", index_path);
		rc = -EINVAL;
		goto out;
	}
	shard_of = calloc((size_t)w->count, sizeof(*shard_of));
	key_of = calloc((size_t)w->count, sizeof(*key_of));
	shards = calloc(json_object_size(map) + 1, sizeof(*shards));
	if (!shard_of || !key_of || !shards) {
		FG_ERR("%s: out of memory", index_path);
		rc = -ENOMEM;
		goto out;
	}
	json_object_foreach(map, key, v) {
		const char *file = json_string_value(v);
		int64_t idx;

		if (!file) {
			FG_ERR("%s: weight_map[\"%s\"] is not a string", index_path, key);
			rc = -EINVAL;
			goto out;
		}
		if (!wt_plain_name(file)) {
			FG_ERR("%s: weight_map[\"%s\"] is \"%s\": shard names must be plain file "
			       "names inside the model folder",
			       index_path, key, file);
			rc = -EINVAL;
			goto out;
		}
		idx = fg_arch_tensor_index(&w->cfg, key);
		if (idx < 0)
			continue;
		if (key_of[idx]) {
			FG_ERR("%s: weight_map lists both \"%s\" and \"%s\" for the same tensor",
			       index_path, key_of[idx], key);
			rc = -EINVAL;
			goto out;
		}
		key_of[idx] = key;
		for (s = 0; s < nshards && strcmp(shards[s], file) != 0; s++)
			;
		if (s == nshards)
			shards[nshards++] = file;
		shard_of[idx] = shards[s];
	}
	for (i = 0; i < w->count; i++) {
		char name[WT_NAME_MAX];
		int64_t r, c;
		int rank;

		if (key_of[i])
			continue;
		fg_arch_tensor_info(&w->cfg, i, name, sizeof(name), &rank, &r, &c);
		FG_ERR("%s: tensor \"%s\" is missing from weight_map", index_path, name);
		rc = -ENOENT;
		goto out;
	}
	/* Each shard is opened and validated once. */
	for (s = 0; s < nshards; s++) {
		struct fg_st_file *st;
		char *path = wt_join(dir, shards[s]);
		int64_t fi;

		if (!path) {
			rc = -ENOMEM;
			goto out;
		}
		rc = fg_st_open(path, &st);
		free(path);
		if (rc)
			goto out;
		fi = wt_keep_st(w, st);
		if (fi < 0) {
			fg_st_close(st);
			rc = (int)fi;
			goto out;
		}
		for (i = 0; i < w->count && rc == 0; i++) {
			const struct fg_st_tensor *t;

			if (shard_of[i] != shards[s])
				continue;
			t = fg_st_find(st, key_of[i]);
			if (!t) {
				FG_ERR("%s: tensor \"%s\" is missing (%s maps it to this file)",
				       st->path, key_of[i], index_path);
				rc = -ENOENT;
				break;
			}
			rc = wt_place_st(w, i, fi, st, t);
		}
		fg_st_close(st);
		if (rc)
			goto out;
	}
	rc = wt_check_complete(w, index_path);
out:
	free(shard_of);
	free(key_of);
	free(shards);
	json_decref(root);
	return rc;
}

/* A FlexGen folder: "<dir>/<name>", with ".npy" or FlexGen's final-norm name as fallbacks. */
static char *wt_npy_path(const char *dir, const char *name)
{
	char alt[WT_NAME_MAX];
	char *p;

	p = wt_join(dir, name);
	if (!p || wt_exists(p))
		return p;
	free(p);
	snprintf(alt, sizeof(alt), "%s.npy", name);
	p = wt_join(dir, alt);
	if (!p || wt_exists(p))
		return p;
	free(p);
	if (strncmp(name, "decoder.final_layer_norm.", 25) == 0) {
		snprintf(alt, sizeof(alt), "decoder.layer_norm.%s", name + 25);
		p = wt_join(dir, alt);
		if (!p || wt_exists(p))
			return p;
		free(p);
	}
	return wt_join(dir, name); /* for the error message */
}

static int wt_open_npy(struct fg_weights *w, const char *dir)
{
	char name[WT_NAME_MAX];
	int64_t i, r, c;
	int rank, rc;

	for (i = 0; i < w->count; i++) {
		struct fg_npy_info info;
		char *path;
		int64_t fi;

		fg_arch_tensor_info(&w->cfg, i, name, sizeof(name), &rank, &r, &c);
		path = wt_npy_path(dir, name);
		if (!path)
			return -ENOMEM;
		if (!wt_exists(path)) {
			FG_ERR("%s: tensor \"%s\" is missing (no file %s)", dir, name, path);
			free(path);
			return -ENOENT;
		}
		rc = fg_npy_open(path, &info);
		if (rc) {
			free(path);
			return rc;
		}
		fi = wt_add_file(w, path, -1, info.file_size);
		if (fi < 0)
			return (int)fi;
		rc = wt_place(w, i, fi, w->files[fi].path, name,
			      info.dtype == FG_NPY_F16 ? "F16" : "F32", info.rank, info.shape,
			      info.data_offset);
		if (rc)
			return rc;
	}
	return 0;
}

/* "/x/opt-1.3b-np/" names the preset opt-1.3b. */
static int wt_npy_preset(const char *dir, struct fg_model_config *cfg)
{
	char base[256];
	const char *end = dir + strlen(dir), *start;
	size_t n;

	while (end > dir && end[-1] == '/')
		end--;
	start = end;
	while (start > dir && start[-1] != '/')
		start--;
	n = (size_t)(end - start);
	if (n >= 3 && strncmp(end - 3, "-np", 3) == 0)
		n -= 3;
	if (n == 0 || n >= sizeof(base)) {
		FG_ERR("%s: no config.json and the folder name names no OPT preset; add the "
		       "model's config.json",
		       dir);
		return -ENOENT;
	}
	memcpy(base, start, n);
	base[n] = '\0';
	if (fg_model_preset(base, cfg) != 0) {
		FG_ERR("%s: no config.json and the folder name \"%s\" is not an OPT preset "
		       "(FlexGen names folders like opt-1.3b-np); add the model's config.json",
		       dir, base);
		return -ENOENT;
	}
	return 0;
}

static int wt_open_folder(struct fg_weights *w, const char *dir)
{
	char *cfg_path = NULL, *index = NULL, *single = NULL, *npy = NULL;
	struct stat st;
	int rc;

	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		FG_ERR("%s: not a model folder; give a folder with config.json and "
		       "model.safetensors, a FlexGen -np folder, or dummy:<preset>",
		       dir);
		return -ENOENT;
	}
	cfg_path = wt_join(dir, "config.json");
	index = wt_join(dir, "model.safetensors.index.json");
	single = wt_join(dir, "model.safetensors");
	npy = wt_npy_path(dir, "decoder.embed_tokens.weight");
	if (!cfg_path || !index || !single || !npy) {
		rc = -ENOMEM;
		goto out;
	}
	if (wt_exists(cfg_path)) {
		rc = fg_model_config_load(cfg_path, &w->cfg);
	} else if (wt_exists(npy)) {
		rc = wt_npy_preset(dir, &w->cfg);
	} else {
		FG_ERR("%s: config.json is missing; copy it from the model's Hugging Face folder",
		       dir);
		rc = -ENOENT;
	}
	if (rc)
		goto out;
	w->count = fg_arch_tensor_count(&w->cfg);
	w->slot = malloc((size_t)w->count * sizeof(*w->slot));
	if (!w->slot) {
		FG_ERR("%s: out of memory", dir);
		rc = -ENOMEM;
		goto out;
	}
	for (int64_t i = 0; i < w->count; i++)
		w->slot[i].file = -1;

	if (wt_exists(index))
		rc = wt_open_sharded(w, dir, index);
	else if (wt_exists(single))
		rc = wt_open_single(w, single);
	else if (wt_exists(npy))
		rc = wt_open_npy(w, dir);
	else {
		FG_ERR("%s: no model.safetensors, model.safetensors.index.json or FlexGen .npy "
		       "files (decoder.embed_tokens.weight); PyTorch .bin checkpoints must be "
		       "converted to safetensors first",
		       dir);
		rc = -ENOENT;
	}
out:
	free(cfg_path);
	free(index);
	free(single);
	free(npy);
	return rc;
}

int fg_weights_open(const char *spec, struct fg_model_config *cfg, struct fg_weights **out)
{
	struct fg_weights *w;
	int rc;

	*out = NULL;
	if (!spec || !*spec) {
		FG_ERR("weights: no model given; give a model folder or dummy:<preset>");
		return -EINVAL;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		FG_ERR("%s: out of memory", spec);
		return -ENOMEM;
	}
	if (strncmp(spec, "dummy:", 6) == 0) {
		rc = fg_model_preset(spec + 6, &w->cfg);
		if (rc == 0) {
			w->dummy = 1;
			w->count = fg_arch_tensor_count(&w->cfg);
		}
	} else {
		rc = wt_open_folder(w, spec);
	}
	if (rc) {
		fg_weights_close(w);
		return rc;
	}
	if (cfg)
		*cfg = w->cfg;
	*out = w;
	return 0;
}

void fg_weights_close(struct fg_weights *w)
{
	int64_t i;

	if (!w)
		return;
	for (i = 0; i < w->nfiles; i++) {
		if (w->files[i].fd >= 0)
			close(w->files[i].fd);
		free(w->files[i].path);
	}
	free(w->files);
	free(w->slot);
	free(w);
}

/* n elements of dtype d at off, converted to fp16 into dst. */
static int wt_read_convert(int fd, enum wt_dtype d, uint64_t off, uint64_t n, uint16_t *dst)
{
	unsigned esize = d == WT_F32 ? 4 : 2;
	unsigned char *buf;
	uint64_t done = 0, i;
	int rc = 0;

	if (d == WT_F16)
		return fg_pread_full(fd, dst, (size_t)(n * 2), off);
	buf = malloc((size_t)WT_CHUNK * esize);
	if (!buf)
		return -ENOMEM;
	while (done < n) {
		uint64_t k = n - done < WT_CHUNK ? n - done : WT_CHUNK;

		rc = fg_pread_full(fd, buf, (size_t)(k * esize), off + done * esize);
		if (rc)
			break;
		if (d == WT_F32) {
			for (i = 0; i < k; i++) {
				float f;

				memcpy(&f, buf + 4 * i, 4);
				dst[done + i] = fg_float_to_half(f);
			}
		} else {
			for (i = 0; i < k; i++) {
				uint16_t b;

				memcpy(&b, buf + 2 * i, 2);
				dst[done + i] = fg_float_to_half(fg_bf16_to_float(b));
			}
		}
		done += k;
	}
	free(buf);
	return rc;
}

/* The first non-finite fp16 value of n (its index), or -1.  A pass over
 * bytes just read: cheap beside reading them, and a damaged checkpoint (or
 * one whose values overflow fp16) is named at load instead of turning every
 * logit into NaN. */
static int64_t wt_first_nonfinite(const uint16_t *h, uint64_t n)
{
	for (uint64_t b = 0; b < n; b += 4096) {
		uint64_t e = n - b < 4096 ? n : b + 4096;
		unsigned any = 0;

		for (uint64_t i = b; i < e; i++) /* no early exit: it vectorizes */
			any |= (h[i] & 0x7c00u) == 0x7c00u;
		for (uint64_t i = b; any && i < e; i++)
			if ((h[i] & 0x7c00u) == 0x7c00u)
				return (int64_t)i;
	}
	return -1;
}

static int wt_read(struct fg_weights *w, const char *name, int64_t row0, int64_t nrows,
		   int64_t rows_req, int64_t cols, uint16_t *dst)
{
	char canon[WT_NAME_MAX];
	const struct wt_slot *s;
	struct wt_file *f;
	int64_t idx, rows, tcols;
	uint64_t off;
	int rank, fd, rc;

	idx = fg_arch_tensor_index(&w->cfg, name);
	if (idx < 0) {
		FG_ERR("weights %s: \"%s\" is not a tensor of this model", w->cfg.name, name);
		return -ENOENT;
	}
	fg_arch_tensor_info(&w->cfg, idx, canon, sizeof(canon), &rank, &rows, &tcols);
	if (cols != tcols || (rows_req >= 0 && rows_req != rows)) {
		FG_ERR("weights %s: tensor \"%s\" is [%lld, %lld], read as [%lld, %lld]",
		       w->cfg.name, canon, (long long)rows, (long long)tcols,
		       (long long)(rows_req >= 0 ? rows_req : nrows), (long long)cols);
		return -EINVAL;
	}
	if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0) {
		FG_ERR("weights %s: rows [%lld, %lld) of tensor \"%s\" are outside its %lld rows",
		       w->cfg.name, (long long)row0, (long long)row0 + nrows, canon,
		       (long long)rows);
		return -EINVAL;
	}
	if (w->dummy) {
		fg_dummy_fill(canon, fg_arch_tensor_def(&w->cfg, idx)->init, (uint64_t)(row0 * cols),
			      (uint64_t)(nrows * cols), dst);
		return 0;
	}
	s = &w->slot[idx];
	f = &w->files[s->file];
	off = s->offset + (uint64_t)(row0 * cols) * (s->dtype == WT_F32 ? 4 : 2);
	fd = f->fd;
	if (fd < 0) {
		struct stat st;

		/* The file was regular when the model was opened; a FIFO put in
		 * its place since must not hang the read. */
		fd = fg_open_regular(f->path, &st);
		if (fd < 0) {
			char why[512];

			snprintf(why, sizeof(why), "%s", fg_last_error());
			FG_ERR("%s (tensor \"%s\")", why, canon);
			return fd;
		}
		if ((uint64_t)st.st_size != f->size) {
			FG_ERR("%s: the file changed size since the model was opened (tensor "
			       "\"%s\")",
			       f->path, canon);
			close(fd);
			return -EIO;
		}
	}
	rc = wt_read_convert(fd, s->dtype, off, (uint64_t)(nrows * cols), dst);
	if (f->fd < 0)
		close(fd);
	if (rc == -EIO)
		FG_ERR("%s: file ended while reading tensor \"%s\" (rows %lld..%lld at byte "
		       "%llu); was it truncated or replaced while open?",
		       f->path, canon, (long long)row0, (long long)(row0 + nrows),
		       (unsigned long long)off);
	else if (rc == -ENOMEM)
		FG_ERR("%s: out of memory converting tensor \"%s\"", f->path, canon);
	else if (rc)
		FG_ERR("%s: read error on tensor \"%s\": %s", f->path, canon, strerror(-rc));
	int64_t bad = rc ? -1 : wt_first_nonfinite(dst, (uint64_t)(nrows * cols));
	if (bad >= 0) {
		int nan = (dst[bad] & 0x3ffu) != 0;
		FG_ERR("%s: tensor \"%s\" holds %s at [%lld, %lld]%s: the model would compute "
		       "NaN; repair or re-export the checkpoint",
		       f->path, canon, nan ? "NaN" : "an infinity", (long long)(row0 + bad / cols),
		       (long long)(bad % cols),
		       !nan && s->dtype != WT_F16 ? " (the stored value is beyond fp16's 65504)" : "");
		rc = -EINVAL;
	}
	return rc;
}

int fg_weights_read_f16(struct fg_weights *w, const char *name, uint16_t *dst, int64_t rows,
			int64_t cols)
{
	if (rows < 0) {
		FG_ERR("weights %s: tensor \"%s\" read with %lld rows", w->cfg.name, name,
		       (long long)rows);
		return -EINVAL;
	}
	return wt_read(w, name, 0, rows, rows, cols, dst);
}

int fg_weights_read_rows_f16(struct fg_weights *w, const char *name, int64_t row0, int64_t nrows,
			     int64_t cols, uint16_t *dst)
{
	return wt_read(w, name, row0, nrows, -1, cols, dst);
}
