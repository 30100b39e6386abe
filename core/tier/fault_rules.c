/* core/tier/fault_rules.c - parsing and matching the rules of the
 * fault-injection shim (see fault_rules.h). */
#include <errno.h>
#include <string.h>

#include <fgcore/storage.h>

#include "core/tier/fault_rules.h"

static const struct {
	const char *name;
	int err;
} fg_fault_errnames[] = {
	{ "EIO", EIO }, { "ENOSPC", ENOSPC }, { "ENOMEM", ENOMEM }, { "EROFS", EROFS },
	{ "EDQUOT", EDQUOT }, { "EFBIG", EFBIG }, { "EBADF", EBADF }, { "EINVAL", EINVAL },
	{ "EAGAIN", EAGAIN }, { "EINTR", EINTR }, { "ENXIO", ENXIO },
	{ "ETIMEDOUT", ETIMEDOUT }, { "EPERM", EPERM }, { "EACCES", EACCES },
};

bool fg_fault_rules_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 19)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return true;
}

/* One rule "op:ERRNO:N" in s[0, n). */
static bool fg_fault_rule_parse(const char *s, size_t n, struct fg_fault_rule *f)
{
	const char *c1 = memchr(s, ':', n), *c2, *e;
	size_t elen;
	uint64_t v;

	if (!c1)
		return false;
	c2 = memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - s));
	if (!c2)
		return false;
	if (c1 - s == 4 && !memcmp(s, "read", 4))
		f->op = FG_IO_READ;
	else if (c1 - s == 5 && !memcmp(s, "write", 5))
		f->op = FG_IO_WRITE;
	else
		return false;
	e = c1 + 1;
	elen = (size_t)(c2 - e);
	f->err = elen == 5 && !memcmp(e, "SHORT", 5) ? FG_FAULT_SHORT : 0;
	for (size_t i = 0; i < sizeof(fg_fault_errnames) / sizeof(fg_fault_errnames[0]); i++)
		if (strlen(fg_fault_errnames[i].name) == elen &&
		    !memcmp(fg_fault_errnames[i].name, e, elen))
			f->err = fg_fault_errnames[i].err;
	if (!f->err) {
		if (!fg_fault_rules_u64(e, elen, &v) || v == 0 || v > 4095)
			return false;
		f->err = (int)v;
	}
	return fg_fault_rules_u64(c2 + 1, n - (size_t)(c2 + 1 - s), &f->nth) && f->nth > 0;
}

int fg_fault_rules_parse(struct fg_fault_rules *f, const char *val)
{
	const char *p = val;

	f->n = 0;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		if (f->n == FG_FAULT_RULES_MAX || !fg_fault_rule_parse(p, n, &f->rule[f->n]))
			break;
		f->n++;
		if (!comma)
			return 0;
		p = comma + 1;
	}
	f->n = 0;
	return -EINVAL;
}

int fg_fault_rules_match(const struct fg_fault_rules *f, int op, uint64_t nth)
{
	for (int i = 0; i < f->n; i++)
		if (f->rule[i].op == op && f->rule[i].nth == nth)
			return f->rule[i].err;
	return 0;
}
