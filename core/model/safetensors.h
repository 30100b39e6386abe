/* core/model/safetensors.h - a validating reader of one .safetensors file.
 *
 * The header is checked completely at open: bounded length, a JSON object,
 * every tensor's dtype known, shape non-negative with an overflow-checked
 * element count matching its byte range, byte ranges inside the data area
 * and not overlapping.  Tensor bytes are then read with pread (never through
 * a mapping, so a file truncated while open gives -EIO instead of SIGBUS).
 */
#ifndef FG_MODEL_SAFETENSORS_H
#define FG_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define FG_ST_MAX_RANK 8
/* The JSON header: at most this many bytes. */
#define FG_ST_HEADER_MAX (UINT64_C(100) << 20)

/* Every dtype the format defines (sizes known so offsets can be checked);
 * the model only reads F16, BF16 and F32. */
enum fg_st_dtype {
	FG_ST_BOOL,
	FG_ST_U8,
	FG_ST_I8,
	FG_ST_F8_E5M2,
	FG_ST_F8_E4M3,
	FG_ST_I16,
	FG_ST_U16,
	FG_ST_F16,
	FG_ST_BF16,
	FG_ST_I32,
	FG_ST_U32,
	FG_ST_F32,
	FG_ST_F64,
	FG_ST_I64,
	FG_ST_U64,
};

struct fg_st_tensor {
	char *name;              /* as in the file */
	enum fg_st_dtype dtype;
	int rank;
	int64_t shape[FG_ST_MAX_RANK];
	uint64_t elems;
	uint64_t offset;         /* absolute byte offset in the file */
	uint64_t nbytes;
};

struct fg_st_file {
	char *path;
	int fd;
	uint64_t size;           /* file size at open */
	uint64_t data_start;     /* 8 + header length */
	size_t count;
	struct fg_st_tensor *t;  /* sorted by name */
};

const char *fg_st_dtype_name(enum fg_st_dtype d);
unsigned fg_st_dtype_size(enum fg_st_dtype d);

/* Open and validate `path`; errors name the file and the tensor or header problem. */
int fg_st_open(const char *path, struct fg_st_file **out);
void fg_st_close(struct fg_st_file *f);

/* The tensor named exactly `name`, or NULL. */
const struct fg_st_tensor *fg_st_find(const struct fg_st_file *f, const char *name);

#endif
