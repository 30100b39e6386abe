/* core/util/fileio.c - bounded whole-file reads and exact preads for the model loaders. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/fileio.h"
#include "core/util/error.h"

int fg_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

const char *fg_file_kind(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO (named pipe)";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISREG(mode))
		return "a regular file";
	return "not a file";
}

/* The null device: a character device with /dev/null's device number. */
static int fg_is_null_device(const struct stat *st)
{
	struct stat null;

	return S_ISCHR(st->st_mode) && stat("/dev/null", &null) == 0 &&
	       S_ISCHR(null.st_mode) && null.st_rdev == st->st_rdev;
}

int fg_open_file(const char *path, unsigned flags, struct stat *out)
{
	struct stat st;
	int fd, fl, rc;

	/* O_NONBLOCK: opening a FIFO returns at once instead of waiting for a
	 * writer; O_NOCTTY: a terminal named by mistake does not become ours. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rc = errno ? -errno : -EIO;
		if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
			FG_ERR("%s: not a regular file (it is %s): give the file itself", path,
			       fg_file_kind(st.st_mode));
			return -EINVAL;
		}
		FG_ERR("%s: cannot open: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = errno ? -errno : -EIO;
		FG_ERR("%s: cannot stat: %s", path, strerror(-rc));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode) && !((flags & FG_OPEN_NULL_OK) && fg_is_null_device(&st))) {
		FG_ERR("%s: not a regular file (it is %s): give the file itself", path,
		       fg_file_kind(st.st_mode));
		close(fd);
		return -EINVAL;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl != -1)
		(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	if (out)
		*out = st;
	return fd;
}

int fg_open_regular(const char *path, struct stat *st)
{
	return fg_open_file(path, 0, st);
}

int fg_read_small_file(const char *path, uint64_t max, char **buf, size_t *len)
{
	struct stat st;
	size_t size;
	char *b;
	int fd, rc;

	fd = fg_open_regular(path, &st);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max) {
		FG_ERR("%s: %llu bytes is more than the %llu this file may have", path,
		       (unsigned long long)st.st_size, (unsigned long long)max);
		close(fd);
		return -EINVAL;
	}
	size = (size_t)st.st_size;
	b = malloc(size + 1);
	if (!b) {
		FG_ERR("%s: out of memory", path);
		close(fd);
		return -ENOMEM;
	}
	rc = fg_pread_full(fd, b, size, 0);
	close(fd);
	if (rc) {
		FG_ERR("%s: read failed: %s", path, strerror(-rc));
		free(b);
		return rc;
	}
	b[size] = '\0';
	*buf = b;
	*len = size;
	return 0;
}

int fg_read_stream(FILE *f, size_t max, char **buf, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);

	*buf = NULL;
	*len = 0;
	while (b) {
		size_t got = fread(b + n, 1, cap - n - 1, f);

		n += got;
		if (n > max) {
			free(b);
			return -EFBIG;
		}
		if (got == 0)
			break;
		if (n + 1 == cap) {
			char *nb = realloc(b, 2 * cap);
			if (!nb)
				free(b);
			b = nb;
			cap *= 2;
		}
	}
	if (!b)
		return -ENOMEM;
	if (ferror(f)) {
		free(b);
		return -EIO;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}
