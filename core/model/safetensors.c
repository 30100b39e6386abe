/* core/model/safetensors.c - open a .safetensors file and validate its whole header. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/util/fileio.h"
#include "core/model/safetensors.h"
#include "core/util/error.h"

static const struct {
	const char *name;
	unsigned size;
} st_dtypes[] = {
	[FG_ST_BOOL] = { "BOOL", 1 },       [FG_ST_U8] = { "U8", 1 },
	[FG_ST_I8] = { "I8", 1 },           [FG_ST_F8_E5M2] = { "F8_E5M2", 1 },
	[FG_ST_F8_E4M3] = { "F8_E4M3", 1 }, [FG_ST_I16] = { "I16", 2 },
	[FG_ST_U16] = { "U16", 2 },         [FG_ST_F16] = { "F16", 2 },
	[FG_ST_BF16] = { "BF16", 2 },       [FG_ST_I32] = { "I32", 4 },
	[FG_ST_U32] = { "U32", 4 },         [FG_ST_F32] = { "F32", 4 },
	[FG_ST_F64] = { "F64", 8 },         [FG_ST_I64] = { "I64", 8 },
	[FG_ST_U64] = { "U64", 8 },
};

#define ST_NDTYPES (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

const char *fg_st_dtype_name(enum fg_st_dtype d)
{
	return (unsigned)d < ST_NDTYPES ? st_dtypes[d].name : "?";
}

unsigned fg_st_dtype_size(enum fg_st_dtype d)
{
	return (unsigned)d < ST_NDTYPES ? st_dtypes[d].size : 0;
}

static int st_dtype_parse(const char *s, enum fg_st_dtype *out)
{
	unsigned i;

	for (i = 0; i < ST_NDTYPES; i++) {
		if (strcmp(s, st_dtypes[i].name) == 0) {
			*out = (enum fg_st_dtype)i;
			return 0;
		}
	}
	return -1;
}

static int st_cmp_name(const void *a, const void *b)
{
	const struct fg_st_tensor *x = a, *y = b;

	return strcmp(x->name, y->name);
}

static int st_cmp_offset(const void *a, const void *b)
{
	const struct fg_st_tensor *x = *(const struct fg_st_tensor *const *)a;
	const struct fg_st_tensor *y = *(const struct fg_st_tensor *const *)b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->nbytes != y->nbytes)
		return x->nbytes < y->nbytes ? -1 : 1;
	return 0;
}

/* Validate one header entry `name: {dtype, shape, data_offsets}`. */
static int st_parse_entry(struct fg_st_file *f, const char *name, json_t *v,
			  struct fg_st_tensor *t)
{
	const char *path = f->path;
	uint64_t data_size = f->size - f->data_start;
	json_t *dt, *shape, *offs, *x;
	json_int_t begin, end;
	uint64_t elems = 1, nbytes;
	unsigned esize;
	size_t i;

	if (!json_is_object(v)) {
		FG_ERR("%s: tensor \"%s\": header entry is not a JSON object", path, name);
		return -EINVAL;
	}
	dt = json_object_get(v, "dtype");
	shape = json_object_get(v, "shape");
	offs = json_object_get(v, "data_offsets");
	if (!json_is_string(dt)) {
		FG_ERR("%s: tensor \"%s\": \"dtype\" is missing or not a string", path, name);
		return -EINVAL;
	}
	if (st_dtype_parse(json_string_value(dt), &t->dtype) != 0) {
		FG_ERR("%s: tensor \"%s\": unknown dtype \"%s\"", path, name,
		       json_string_value(dt));
		return -EINVAL;
	}
	if (!json_is_array(shape)) {
		FG_ERR("%s: tensor \"%s\": \"shape\" is missing or not an array", path, name);
		return -EINVAL;
	}
	if (json_array_size(shape) > FG_ST_MAX_RANK) {
		FG_ERR("%s: tensor \"%s\": rank %zu is above the supported %d", path, name,
		       json_array_size(shape), FG_ST_MAX_RANK);
		return -EINVAL;
	}
	t->rank = (int)json_array_size(shape);
	for (i = 0; i < json_array_size(shape); i++) {
		json_int_t d;

		x = json_array_get(shape, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0) {
			FG_ERR("%s: tensor \"%s\": shape[%zu] is not a non-negative integer", path,
			       name, i);
			return -EINVAL;
		}
		d = json_integer_value(x);
		if (d != 0 && elems > UINT64_MAX / (uint64_t)d) {
			FG_ERR("%s: tensor \"%s\": the element count of its shape overflows", path,
			       name);
			return -EINVAL;
		}
		elems *= (uint64_t)d;
		t->shape[i] = d;
	}
	esize = fg_st_dtype_size(t->dtype);
	if (elems > UINT64_MAX / esize) {
		FG_ERR("%s: tensor \"%s\": the byte size of its shape overflows", path, name);
		return -EINVAL;
	}
	nbytes = elems * esize;
	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    !json_is_integer(json_array_get(offs, 0)) ||
	    !json_is_integer(json_array_get(offs, 1))) {
		FG_ERR("%s: tensor \"%s\": \"data_offsets\" must be [begin, end] integers", path,
		       name);
		return -EINVAL;
	}
	begin = json_integer_value(json_array_get(offs, 0));
	end = json_integer_value(json_array_get(offs, 1));
	if (begin < 0 || end < begin) {
		FG_ERR("%s: tensor \"%s\": data_offsets [%lld, %lld] are not an ascending "
		       "non-negative range",
		       path, name, (long long)begin, (long long)end);
		return -EINVAL;
	}
	if ((uint64_t)end > data_size) {
		FG_ERR("%s: tensor \"%s\": data_offsets end %lld is past the end of the data "
		       "area (%llu bytes); the file is truncated or the header is wrong",
		       path, name, (long long)end, (unsigned long long)data_size);
		return -EINVAL;
	}
	if ((uint64_t)(end - begin) != nbytes) {
		FG_ERR("%s: tensor \"%s\": data_offsets span %lld bytes but %s shape needs %llu",
		       path, name, (long long)(end - begin), fg_st_dtype_name(t->dtype),
		       (unsigned long long)nbytes);
		return -EINVAL;
	}
	t->name = strdup(name);
	if (!t->name) {
		FG_ERR("%s: out of memory", path);
		return -ENOMEM;
	}
	t->elems = elems;
	t->nbytes = nbytes;
	t->offset = f->data_start + (uint64_t)begin;
	return 0;
}

static int st_check_overlap(struct fg_st_file *f)
{
	const struct fg_st_tensor **by_off;
	size_t i;

	if (f->count < 2)
		return 0;
	by_off = malloc(f->count * sizeof(*by_off));
	if (!by_off) {
		FG_ERR("%s: out of memory", f->path);
		return -ENOMEM;
	}
	for (i = 0; i < f->count; i++)
		by_off[i] = &f->t[i];
	qsort(by_off, f->count, sizeof(*by_off), st_cmp_offset);
	for (i = 1; i < f->count; i++) {
		const struct fg_st_tensor *a = by_off[i - 1], *b = by_off[i];

		if (a->offset + a->nbytes > b->offset) {
			FG_ERR("%s: tensors \"%s\" and \"%s\" overlap (data_offsets %llu+%llu and "
			       "%llu); the header is corrupt",
			       f->path, a->name, b->name,
			       (unsigned long long)(a->offset - f->data_start),
			       (unsigned long long)a->nbytes,
			       (unsigned long long)(b->offset - f->data_start));
			free(by_off);
			return -EINVAL;
		}
	}
	free(by_off);
	return 0;
}

static int st_parse_header(struct fg_st_file *f, const char *hdr, size_t len)
{
	json_error_t jerr;
	const char *key;
	json_t *root, *v;
	size_t n = 0;
	int rc = 0;

	root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		FG_ERR("%s: header is not valid JSON (byte %d of the header): %s", f->path,
		       jerr.position, jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		FG_ERR("%s: header is not a JSON object", f->path);
		json_decref(root);
		return -EINVAL;
	}
	f->t = calloc(json_object_size(root) + 1, sizeof(*f->t));
	if (!f->t) {
		FG_ERR("%s: out of memory", f->path);
		json_decref(root);
		return -ENOMEM;
	}
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__") == 0) {
			if (!json_is_object(v)) {
				FG_ERR("%s: header \"__metadata__\" is not a JSON object", f->path);
				rc = -EINVAL;
				break;
			}
			continue;
		}
		rc = st_parse_entry(f, key, v, &f->t[n]);
		if (rc)
			break;
		n++;
	}
	f->count = n;
	json_decref(root);
	if (rc)
		return rc;
	qsort(f->t, f->count, sizeof(*f->t), st_cmp_name);
	return st_check_overlap(f);
}

int fg_st_open(const char *path, struct fg_st_file **out)
{
	struct fg_st_file *f;
	unsigned char lenbuf[8];
	uint64_t hlen = 0;
	struct stat st;
	char *hdr = NULL;
	int rc, i;

	f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path))) {
		free(f);
		FG_ERR("%s: out of memory", path);
		return -ENOMEM;
	}
	f->fd = fg_open_regular(path, &st);
	if (f->fd < 0) {
		rc = f->fd;
		goto fail;
	}
	f->size = (uint64_t)st.st_size;
	if (f->size < 8) {
		FG_ERR("%s: file is %llu bytes, shorter than the 8-byte header length; it is "
		       "truncated",
		       path, (unsigned long long)f->size);
		rc = -EINVAL;
		goto fail;
	}
	rc = fg_pread_full(f->fd, lenbuf, 8, 0);
	if (rc) {
		FG_ERR("%s: cannot read the header length: %s", path, strerror(-rc));
		goto fail;
	}
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | lenbuf[i];
	if (hlen < 2 || hlen > FG_ST_HEADER_MAX) {
		FG_ERR("%s: header length %llu is outside [2, %llu]; not a safetensors file?",
		       path, (unsigned long long)hlen, (unsigned long long)FG_ST_HEADER_MAX);
		rc = -EINVAL;
		goto fail;
	}
	if (hlen > f->size - 8) {
		FG_ERR("%s: header length %llu goes beyond the end of the file (%llu bytes); it "
		       "is truncated",
		       path, (unsigned long long)hlen, (unsigned long long)f->size);
		rc = -EINVAL;
		goto fail;
	}
	f->data_start = 8 + hlen;
	hdr = malloc((size_t)hlen);
	if (!hdr) {
		FG_ERR("%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
		rc = -ENOMEM;
		goto fail;
	}
	rc = fg_pread_full(f->fd, hdr, (size_t)hlen, 8);
	if (rc) {
		FG_ERR("%s: cannot read the %llu-byte header: %s", path, (unsigned long long)hlen,
		       strerror(-rc));
		goto fail;
	}
	rc = st_parse_header(f, hdr, (size_t)hlen);
	if (rc)
		goto fail;
	free(hdr);
	*out = f;
	return 0;
fail:
	free(hdr);
	fg_st_close(f);
	return rc;
}

void fg_st_close(struct fg_st_file *f)
{
	size_t i;

	if (!f)
		return;
	if (f->t) {
		for (i = 0; i < f->count; i++)
			free(f->t[i].name);
		free(f->t);
	}
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	free(f);
}

const struct fg_st_tensor *fg_st_find(const struct fg_st_file *f, const char *name)
{
	struct fg_st_tensor key = { .name = (char *)name };

	if (!f->count)
		return NULL;
	return bsearch(&key, f->t, f->count, sizeof(*f->t), st_cmp_name);
}
