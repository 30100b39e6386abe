/* core/util/parse.c - strict value parsers with "what is wrong, what is allowed" texts. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util/parse.h"

int fg_parse_bool(const char *s, int *out, char *why, size_t n)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	snprintf(why, n, "not a boolean, use true, false, yes, no, on, off, 1 or 0");
	return -EINVAL;
}

static void fg_int_allowed(char *why, size_t n, const char *wrong, int64_t min, int64_t max)
{
	if (min != max)
		snprintf(why, n, "%s, use an integer from %" PRId64 " to %" PRId64, wrong, min,
			 max);
	else
		snprintf(why, n, "%s, use a decimal integer", wrong);
}

int fg_parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *why, size_t n)
{
	char *end;
	long long v;

	/* strtoll skips leading blanks and accepts "+": refuse both so that the
	 * text is exactly a number. */
	if (*s == '\0' || isspace((unsigned char)*s) || *s == '+') {
		fg_int_allowed(why, n, "not an integer", min, max);
		return -EINVAL;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end != '\0') {
		fg_int_allowed(why, n, "not an integer", min, max);
		return -EINVAL;
	}
	if (errno == ERANGE || (min != max && (v < min || v > max))) {
		fg_int_allowed(why, n, "out of range", min, max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int fg_parse_size(const char *s, uint64_t *out, char *why, size_t n)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{ "", 0 }, { "b", 0 },
		{ "k", 10 }, { "kib", 10 },
		{ "m", 20 }, { "mib", 20 },
		{ "g", 30 }, { "gib", 30 },
		{ "t", 40 }, { "tib", 40 },
	};
	const char *allowed = "use a byte count with an optional suffix K, M, G or T "
			      "(powers of 1024; also KiB, MiB, GiB, TiB), e.g. 512M";
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p)) {
		snprintf(why, n, "not a size, %s", allowed);
		return -EINVAL;
	}
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10) {
			snprintf(why, n, "too large (more than 2^64 - 1 bytes), %s", allowed);
			return -EINVAL;
		}
		v = v * 10 + d;
	}
	/* Allow one blank between the number and its unit ("4 GiB"). */
	if (*p == ' ' && p[1] != '\0')
		p++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(p, units[i].suffix) != 0)
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift)) {
			snprintf(why, n, "too large (more than 2^64 - 1 bytes), %s", allowed);
			return -EINVAL;
		}
		*out = v << units[i].shift;
		return 0;
	}
	snprintf(why, n, "not a size (unknown suffix '%s'), %s", p, allowed);
	return -EINVAL;
}

int fg_parse_double(const char *s, int ranged, double min, double max, double *out, char *why,
		    size_t n)
{
	char range[96] = "";
	char *end;
	double v;

	if (ranged)
		snprintf(range, sizeof(range), " from %g to %g", min, max);
	if (*s == '\0' || isspace((unsigned char)*s)) {
		snprintf(why, n, "not a number, use a decimal number%s", range);
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || !isfinite(v)) {
		snprintf(why, n, "not a number, use a decimal number%s", range);
		return -EINVAL;
	}
	if (ranged && (v < min || v > max)) {
		snprintf(why, n, "out of range, use a decimal number%s", range);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int fg_parse_string(const char *s, size_t max, char *why, size_t n)
{
	size_t len = strlen(s);

	if (len >= max) {
		snprintf(why, n, "too long (%zu bytes), use at most %zu bytes", len, max - 1);
		return -EINVAL;
	}
	return 0;
}

const char *fg_format_size(uint64_t v, char *buf, size_t n)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (v != 0 && u < 3 && (v & 1023) == 0) {
		v >>= 10;
		u++;
	}
	if (u < 0)
		snprintf(buf, n, "%" PRIu64, v);
	else
		snprintf(buf, n, "%" PRIu64 "%c", v, units[u]);
	return buf;
}

const char *fg_format_double(double v, char *buf, size_t n)
{
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, n, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return buf;
}
