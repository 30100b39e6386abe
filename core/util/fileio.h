/* core/util/fileio.h - bounded whole-file reads and exact preads for the loaders of model, config and tokenizer files. */
#ifndef FG_UTIL_FILEIO_H
#define FG_UTIL_FILEIO_H

#include <stddef.h>
#include <stdint.h>

/* pread exactly len bytes at off: 0, -EIO when the file ends first, or -errno. */
int fg_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* Read a regular file of at most max bytes into a NUL-terminated malloc'd
 * buffer (*buf, *len without the NUL).  Errors name the file. */
int fg_read_small_file(const char *path, uint64_t max, char **buf, size_t *len);

#endif
