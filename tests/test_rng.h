/* tests/test_rng.h - the tests' pseudo-random numbers: xorshift64*, so that
 * a failing case can be rerun from its seed on any machine.  Each test
 * program has its own generator state (these are static). */
#ifndef FG_TESTS_TEST_RNG_H
#define FG_TESTS_TEST_RNG_H

#include <stdint.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull; /* never 0 */

static inline uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* [0, n); 0 when n is 0 */
static inline uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

/* [-1, 1), 24 random bits */
static inline float urand(void)
{
	return (float)((rnd() >> 40) * (2.0 / 16777216.0) - 1.0);
}

static inline void rnd_fill(void *p, size_t n)
{
	unsigned char *b = p;
	uint64_t v;

	for (; n >= 8; n -= 8, b += 8) {
		v = rnd();
		memcpy(b, &v, 8);
	}
	v = rnd();
	memcpy(b, &v, n);
}

#endif
