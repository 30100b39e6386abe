/* core/model/npy.h - the NumPy .npy header (format 1.0, 2.0, 3.0), parsed strictly.
 *
 * FlexGen's "-np" folders hold one .npy file per tensor.  Only what np.save
 * writes for a C-ordered little-endian float16/float32 array is accepted:
 *   {'descr': '<f2', 'fortran_order': False, 'shape': (rows, cols), }
 */
#ifndef FG_MODEL_NPY_H
#define FG_MODEL_NPY_H

#include <stddef.h>
#include <stdint.h>

#define FG_NPY_MAX_RANK 8
/* np.load refuses headers over 10000 bytes by default; allow some more. */
#define FG_NPY_HEADER_MAX 65536u

enum fg_npy_dtype {
	FG_NPY_F16, /* '<f2' */
	FG_NPY_F32, /* '<f4' */
};

struct fg_npy_info {
	enum fg_npy_dtype dtype;
	int rank;
	int64_t shape[FG_NPY_MAX_RANK];
	uint64_t elems;
	uint64_t data_offset; /* first byte of the array */
	uint64_t nbytes;      /* elems * item size */
	uint64_t file_size;   /* at open */
};

/* Parse the header dictionary text (without the magic and length fields).
 * On error returns -EINVAL and writes a reason (no file name) to why. */
int fg_npy_parse_dict(const char *text, size_t len, struct fg_npy_info *info, char *why,
		      size_t why_len);

/* Open `path`, parse and check its header and that the data length matches
 * the shape exactly; the file is closed again.  Errors name the file. */
int fg_npy_open(const char *path, struct fg_npy_info *info);

#endif
