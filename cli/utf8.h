/* cli/utf8.h - text that may not be valid UTF-8 made valid for JSON writers. */
#ifndef FG_CLI_UTF8_H
#define FG_CLI_UTF8_H

#include <stddef.h>

/* A malloc'd copy of the len bytes at s with every ill-formed sequence
 * replaced by U+FFFD, one per maximal subpart as Unicode recommends (what
 * Python's bytes.decode("utf-8", "replace") and Hugging Face's decode give);
 * NUL bytes become U+FFFD too, so the result is a C string.  NULL: out of
 * memory. */
char *fg_utf8_repair(const char *s, size_t len);

#endif
