/* core/model/npy.c - strict reader of .npy headers for FlexGen "-np" weight folders. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/fileio.h"
#include "core/model/npy.h"
#include "core/util/error.h"

/* A dimension above this is nonsense for a weight (and keeps products small). */
#define NPY_DIM_MAX (INT64_C(1) << 40)

struct npy_lex {
	const char *start, *p, *end;
	char *why;
	size_t why_len;
};

static int npy_fail(struct npy_lex *lx, const char *fmt, ...) FG_PRINTF(2, 3);

static int npy_fail(struct npy_lex *lx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(lx->why, lx->why_len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void npy_ws(struct npy_lex *lx)
{
	while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n'))
		lx->p++;
}

static int npy_expect(struct npy_lex *lx, char c)
{
	npy_ws(lx);
	if (lx->p >= lx->end || *lx->p != c)
		return npy_fail(lx, "expected '%c' at header byte %td", c, lx->p - lx->start);
	lx->p++;
	return 0;
}

/* A Python string literal without escapes, quoted with ' or ". */
static int npy_string(struct npy_lex *lx, char *buf, size_t len)
{
	const char *start;
	size_t n;
	char q;

	npy_ws(lx);
	if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"'))
		return npy_fail(lx, "expected a quoted string");
	q = *lx->p++;
	start = lx->p;
	while (lx->p < lx->end && *lx->p != q) {
		if (*lx->p == '\\' || *lx->p == '\n')
			return npy_fail(lx, "unexpected character in a string");
		lx->p++;
	}
	if (lx->p >= lx->end)
		return npy_fail(lx, "unterminated string");
	n = (size_t)(lx->p - start);
	lx->p++;
	if (n >= len)
		return npy_fail(lx, "string \"%.*s...\" is too long", 16, start);
	memcpy(buf, start, n);
	buf[n] = '\0';
	return 0;
}

static int npy_word(struct npy_lex *lx, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(lx->end - lx->p) >= n && memcmp(lx->p, w, n) == 0) {
		lx->p += n;
		return 1;
	}
	return 0;
}

static int npy_shape(struct npy_lex *lx, struct fg_npy_info *info)
{
	uint64_t elems = 1;
	int n = 0, comma = 0;

	if (npy_expect(lx, '('))
		return npy_fail(lx, "'shape' must be a tuple");
	for (;;) {
		int64_t d = 0;

		npy_ws(lx);
		if (lx->p < lx->end && *lx->p == ')') {
			lx->p++;
			break;
		}
		if (n > 0 && !comma)
			return npy_fail(lx, "expected ',' or ')' in 'shape'");
		if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9')
			return npy_fail(lx, "'shape' must hold non-negative integers");
		while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
			d = d * 10 + (*lx->p++ - '0');
			if (d > NPY_DIM_MAX)
				return npy_fail(lx, "a 'shape' dimension is too large");
		}
		if (n == FG_NPY_MAX_RANK)
			return npy_fail(lx, "'shape' has more than %d dimensions", FG_NPY_MAX_RANK);
		if (d != 0 && elems > UINT64_MAX / 8 / (uint64_t)d)
			return npy_fail(lx, "the element count of 'shape' overflows");
		elems *= (uint64_t)d;
		info->shape[n++] = d;
		npy_ws(lx);
		comma = lx->p < lx->end && *lx->p == ',';
		if (comma)
			lx->p++;
	}
	/* Python spells a 1-tuple "(n,)"; "(n)" is not a tuple. */
	if (n == 1 && !comma)
		return npy_fail(lx, "'shape' (n) is not a tuple; expected (n,)");
	info->rank = n;
	info->elems = elems;
	return 0;
}

int fg_npy_parse_dict(const char *text, size_t len, struct fg_npy_info *info, char *why,
		      size_t why_len)
{
	struct npy_lex lx = {
		.start = text, .p = text, .end = text + len, .why = why, .why_len = why_len
	};
	int have_descr = 0, have_order = 0, have_shape = 0;
	char key[32], descr[16];
	int rc;

	if (npy_expect(&lx, '{'))
		return npy_fail(&lx, "header is not a dict");
	for (;;) {
		npy_ws(&lx);
		if (lx.p < lx.end && *lx.p == '}') {
			lx.p++;
			break;
		}
		if ((rc = npy_string(&lx, key, sizeof(key))))
			return rc;
		if ((rc = npy_expect(&lx, ':')))
			return rc;
		npy_ws(&lx);
		if (strcmp(key, "descr") == 0 && !have_descr) {
			if ((rc = npy_string(&lx, descr, sizeof(descr))))
				return rc;
			if (strcmp(descr, "<f2") == 0)
				info->dtype = FG_NPY_F16;
			else if (strcmp(descr, "<f4") == 0)
				info->dtype = FG_NPY_F32;
			else if (descr[0] == '>')
				return npy_fail(&lx, "big-endian dtype '%s' is not supported", descr);
			else
				return npy_fail(&lx,
						"dtype '%s' is not supported (need '<f2' or '<f4')",
						descr);
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0 && !have_order) {
			if (npy_word(&lx, "True"))
				return npy_fail(&lx, "Fortran-ordered arrays are not supported; "
						     "save with np.ascontiguousarray");
			if (!npy_word(&lx, "False"))
				return npy_fail(&lx, "'fortran_order' must be True or False");
			have_order = 1;
		} else if (strcmp(key, "shape") == 0 && !have_shape) {
			if ((rc = npy_shape(&lx, info)))
				return rc;
			have_shape = 1;
		} else {
			return npy_fail(&lx, "unexpected or repeated key '%s'", key);
		}
		npy_ws(&lx);
		if (lx.p < lx.end && *lx.p == ',') {
			lx.p++;
			continue;
		}
		if (lx.p < lx.end && *lx.p == '}') {
			lx.p++;
			break;
		}
		return npy_fail(&lx, "expected ',' or '}' after key '%s'", key);
	}
	npy_ws(&lx);
	if (lx.p != lx.end)
		return npy_fail(&lx, "unexpected text after the header dict");
	if (!have_descr || !have_order || !have_shape)
		return npy_fail(&lx, "header lacks '%s'",
				!have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	info->nbytes = info->elems * (info->dtype == FG_NPY_F16 ? 2 : 4);
	return 0;
}

int fg_npy_open(const char *path, struct fg_npy_info *info)
{
	static const unsigned char magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };
	unsigned char pre[12];
	char *hdr = NULL;
	char why[160];
	uint64_t hlen, hstart;
	struct stat st;
	int fd, rc;

	memset(info, 0, sizeof(*info));
	fd = fg_open_regular(path, &st);
	if (fd < 0)
		return fd;
	info->file_size = (uint64_t)st.st_size;
	if (info->file_size < 10 || fg_pread_full(fd, pre, 10, 0) != 0 ||
	    memcmp(pre, magic, 6) != 0) {
		FG_ERR("%s: not a NumPy .npy file (bad magic or truncated)", path);
		rc = -EINVAL;
		goto out;
	}
	if (pre[6] == 1 && pre[7] == 0) {
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
		hstart = 10;
	} else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
		if (info->file_size < 12 || fg_pread_full(fd, pre, 12, 0) != 0) {
			FG_ERR("%s: .npy header is truncated", path);
			rc = -EINVAL;
			goto out;
		}
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
		       (uint64_t)pre[11] << 24;
		hstart = 12;
	} else {
		FG_ERR("%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)", path,
		       pre[6], pre[7]);
		rc = -EINVAL;
		goto out;
	}
	if (hlen > FG_NPY_HEADER_MAX) {
		FG_ERR("%s: .npy header length %llu is above the %u-byte limit", path,
		       (unsigned long long)hlen, FG_NPY_HEADER_MAX);
		rc = -EINVAL;
		goto out;
	}
	if (hstart + hlen > info->file_size) {
		FG_ERR("%s: .npy header length %llu goes beyond the end of the file (%llu bytes)",
		       path, (unsigned long long)hlen, (unsigned long long)info->file_size);
		rc = -EINVAL;
		goto out;
	}
	hdr = malloc(hlen ? (size_t)hlen : 1);
	if (!hdr) {
		FG_ERR("%s: out of memory", path);
		rc = -ENOMEM;
		goto out;
	}
	if (fg_pread_full(fd, hdr, (size_t)hlen, hstart) != 0) {
		FG_ERR("%s: cannot read the .npy header", path);
		rc = -EIO;
		goto out;
	}
	if (memchr(hdr, '\0', (size_t)hlen)) {
		FG_ERR("%s: .npy header contains a NUL byte", path);
		rc = -EINVAL;
		goto out;
	}
	rc = fg_npy_parse_dict(hdr, (size_t)hlen, info, why, sizeof(why));
	if (rc) {
		FG_ERR("%s: bad .npy header: %s", path, why);
		goto out;
	}
	info->data_offset = hstart + hlen;
	if (info->file_size - info->data_offset != info->nbytes) {
		FG_ERR("%s: .npy data is %llu bytes but shape and dtype need %llu; the file is "
		       "%s",
		       path, (unsigned long long)(info->file_size - info->data_offset),
		       (unsigned long long)info->nbytes,
		       info->file_size - info->data_offset < info->nbytes ? "truncated"
									    : "corrupt");
		rc = -EINVAL;
		goto out;
	}
	rc = 0;
out:
	free(hdr);
	close(fd);
	return rc;
}
