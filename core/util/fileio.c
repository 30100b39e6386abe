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

int fg_read_small_file(const char *path, uint64_t max, char **buf, size_t *len)
{
	struct stat st;
	size_t size;
	char *b;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno ? -errno : -EIO;
		FG_ERR("%s: cannot open: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		FG_ERR("%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
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
