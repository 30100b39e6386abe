/* core/util/utf8.h - well-formed UTF-8 (Unicode's definition: no overlongs,
 * surrogates or code points above U+10FFFF). */
#ifndef FG_UTIL_UTF8_H
#define FG_UTIL_UTF8_H

#include <stddef.h>

/* Bytes of the well-formed sequence at s (len >= 1 bytes there), or 0 when
 * it is ill-formed, with *bad = the length of its maximal subpart (>= 1):
 * what one U+FFFD replaces. */
size_t fg_utf8_seq(const unsigned char *s, size_t len, size_t *bad);

/* A malloc'd C string: the len bytes at s with every maximal ill-formed
 * subpart replaced by U+FFFD, as Python's bytes.decode("utf-8", "replace")
 * and Hugging Face's decode do; NUL bytes become U+FFFD too, so the result is
 * a C string (for JSON writers).  NULL: out of memory. */
char *fg_utf8_repair(const char *s, size_t len);

/* Code points of len bytes of UTF-8 (the characters a Python client
 * indexes a text by). */
size_t fg_utf8_chars(const char *s, size_t len);

/* A decoded text (len bytes at *s, NUL-terminated) made a C string: a token
 * can decode to a NUL byte, where every C string holding the text would
 * end; each becomes U+FFFD (*s replaced when it held any).  0 or -ENOMEM. */
int fg_utf8_nul_free(char **s, size_t len);

#endif
