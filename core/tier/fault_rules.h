/* core/tier/fault_rules.h - the rules of the fault-injection shim
 * (FGCORE_<PLUGIN>_FAULT, see fault_shim.h), parsed and matched here.
 *
 * A value holds up to FG_FAULT_RULES_MAX comma-separated rules "op:ERRNO:N":
 * op is read or write, ERRNO a name such as EIO or ENOSPC, a number 1..4095,
 * or SHORT; N >= 1 the request of that op, counted from 1, that it hits.
 */
#ifndef FG_TIER_FAULT_RULES_H
#define FG_TIER_FAULT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FG_FAULT_RULES_MAX 8
#define FG_FAULT_SHORT (-1) /* not an errno: the transfer stops half-way */

struct fg_fault_rule {
	int op;       /* FG_IO_READ or FG_IO_WRITE */
	int err;      /* positive errno, or FG_FAULT_SHORT */
	uint64_t nth;
};

struct fg_fault_rules {
	struct fg_fault_rule rule[FG_FAULT_RULES_MAX];
	int n;
};

/* Parse val into f: 0, or -EINVAL for a malformed value (an empty one too),
 * with no message: the caller says what it expects. */
int fg_fault_rules_parse(struct fg_fault_rules *f, const char *val);

/* What the nth request of op meets: the errno to inject, FG_FAULT_SHORT, or 0. */
int fg_fault_rules_match(const struct fg_fault_rules *f, int op, uint64_t nth);

/* A decimal number of 1..19 digits filling s[0, n). */
bool fg_fault_rules_u64(const char *s, size_t n, uint64_t *out);

#endif
