/* bench/sample_bench.c - next-token sampling on the host over one row of an
 * OPT-sized vocabulary: fg_sample (partial selection) against
 * fg_sample_sorted (the whole vocabulary sorted, as before), and greedy.
 *
 *   sample_bench [-n VOCAB] [-r ROWS] [-s SPREAD] [-t TEMP] [-k TOP_K] [-p TOP_P]
 *
 * Each of ROWS rows (default 2000) holds VOCAB (default 50272) logits drawn
 * from a normal distribution of standard deviation SPREAD (default 3, about a
 * language model's; 0.01 is what random weights give).  Every token of both
 * samplers is compared: a difference is an error.  Prints microseconds per
 * sampled token.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sampling/sample.h"
#include "core/util/clock.h"

static double normal(struct fg_rng *r)
{
	double u = fg_rng_uniform(r), v = fg_rng_uniform(r);
	return sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v);
}

int main(int argc, char **argv)
{
	long n = 50272, rows = 2000;
	double spread = 3;
	struct fg_sampling p = { .temperature = 0.8f, .top_k = 0, .top_p = 0.9f };
	int c;

	while ((c = getopt(argc, argv, "n:r:s:t:k:p:")) != -1) {
		switch (c) {
		case 'n': n = atol(optarg); break;
		case 'r': rows = atol(optarg); break;
		case 's': spread = atof(optarg); break;
		case 't': p.temperature = (float)atof(optarg); break;
		case 'k': p.top_k = atoi(optarg); break;
		case 'p': p.top_p = (float)atof(optarg); break;
		default:
			fprintf(stderr, "usage: sample_bench [-n VOCAB] [-r ROWS] [-s SPREAD] [-t TEMP] "
				"[-k TOP_K] [-p TOP_P]\n");
			return 2;
		}
	}
	if (n < 1 || rows < 1 || n > 1 << 28) {
		fprintf(stderr, "sample_bench: -n 1..2^28 and -r >= 1\n");
		return 2;
	}
	/* 16 distinct rows, reused, so that generating logits is not timed */
	enum { DISTINCT = 16 };
	float *l = malloc(sizeof(float) * (size_t)n * DISTINCT);
	int32_t *want = malloc(sizeof(int32_t) * (size_t)rows);
	struct fg_sampler *s;
	struct fg_rng r, a, b;
	if (!l || !want || fg_sampler_new(&s, n)) {
		fprintf(stderr, "sample_bench: out of memory\n");
		return 1;
	}
	fg_rng_seed(&r, 1);
	for (long i = 0; i < n * DISTINCT; i++)
		l[i] = (float)(spread * normal(&r));

	fg_rng_seed(&a, 7);
	double t0 = fg_now();
	for (long i = 0; i < rows; i++)
		want[i] = fg_sample_sorted(s, l + (i % DISTINCT) * n, &p, &a);
	double t1 = fg_now();
	fg_rng_seed(&b, 7);
	long diff = 0;
	for (long i = 0; i < rows; i++)
		diff += fg_sample(s, l + (i % DISTINCT) * n, &p, &b) != want[i];
	double t2 = fg_now();
	struct fg_sampling g = { 0 };
	volatile int32_t sink = 0;
	for (long i = 0; i < rows; i++)
		sink += fg_sample(s, l + (i % DISTINCT) * n, &g, &b);
	double t3 = fg_now();
	(void)sink;

	printf("vocab %ld, %ld rows, logits N(0, %g), temperature %g, top_k %d, top_p %g\n", n, rows,
	       spread, p.temperature, p.top_k, p.top_p);
	printf("full sort (before):        %9.1f us/token\n", (t1 - t0) / (double)rows * 1e6);
	printf("partial selection (after): %9.1f us/token (x%.1f)\n", (t2 - t1) / (double)rows * 1e6,
	       (t1 - t0) / (t2 - t1));
	printf("greedy (argmax):           %9.1f us/token\n", (t3 - t2) / (double)rows * 1e6);
	if (diff) {
		fprintf(stderr, "sample_bench: %ld of %ld tokens differ from the full sort's\n", diff, rows);
		return 1;
	}
	printf("every token equal to the full sort's\n");
	fg_sampler_free(s);
	free(l);
	free(want);
	return 0;
}
