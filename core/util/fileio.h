/* core/util/fileio.h - bounded whole-file reads and exact preads for the loaders of model, config and tokenizer files. */
#ifndef FG_UTIL_FILEIO_H
#define FG_UTIL_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/* pread exactly len bytes at off: 0, -EIO when the file ends first, or -errno. */
int fg_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* Open path read-only, refusing anything but a regular file, without ever
 * blocking (a FIFO with no writer would hang a plain open for ever).  With
 * FG_OPEN_NULL_OK the null device is accepted too (an empty file).  Returns
 * the descriptor (O_CLOEXEC, blocking mode; *st filled when st is non-NULL) or
 * -errno with one error line naming the file and what it is instead (-EINVAL
 * for a file that is not regular). */
#define FG_OPEN_NULL_OK 1u
int fg_open_file(const char *path, unsigned flags, struct stat *st);

/* fg_open_file(path, 0, st) */
int fg_open_regular(const char *path, struct stat *st);

/* What a file of this mode is, for messages: "a directory", "a FIFO (named
 * pipe)", ... */
const char *fg_file_kind(mode_t mode);

/* Read a regular file of at most max bytes into a NUL-terminated malloc'd
 * buffer (*buf, *len without the NUL).  Errors name the file. */
int fg_read_small_file(const char *path, uint64_t max, char **buf, size_t *len);

/* The rest of an open stream (a file or a pipe such as stdin), at most max
 * bytes, into a NUL-terminated malloc'd buffer: 0, -EFBIG (it holds more),
 * -ENOMEM, or -EIO (errno from the read).  No error line: the caller names
 * the stream. */
int fg_read_stream(FILE *f, size_t max, char **buf, size_t *len);

#endif
