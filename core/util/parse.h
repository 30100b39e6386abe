/* core/util/parse.h - strict parsing of option values (bool, int, size, double)
 * shared by the plugin options and the configuration.
 *
 * Each parser takes the whole string (no leading or trailing junk), returns 0
 * or -EINVAL, and on failure writes "<what is wrong>, <what is allowed>" into
 * why[n] (e.g. "not a boolean, use true, false, yes, no, on, off, 1 or 0"). */
#ifndef FG_UTIL_PARSE_H
#define FG_UTIL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* true/false, yes/no, on/off, 1/0 (letters in any case). */
int fg_parse_bool(const char *s, int *out, char *why, size_t n);

/* Decimal integer; when min != max it must lie in [min, max]. */
int fg_parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *why, size_t n);

/* Byte count: digits with an optional suffix K, M, G, T (powers of 1024; also
 * KiB, MiB, GiB, TiB and B, letters in any case). */
int fg_parse_size(const char *s, uint64_t *out, char *why, size_t n);

/* Finite decimal number; when ranged != 0 it must lie in [min, max]. */
int fg_parse_double(const char *s, int ranged, double min, double max, double *out, char *why,
		    size_t n);

/* Text of at most max - 1 bytes. */
int fg_parse_string(const char *s, size_t max, char *why, size_t n);

/* Normalized text: sizes as the largest exact suffix ("64M", "1000"),
 * doubles as the shortest text that reads back to the same value. */
const char *fg_format_size(uint64_t v, char *buf, size_t n);
const char *fg_format_double(double v, char *buf, size_t n);

#endif
