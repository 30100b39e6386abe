/* tests/heldout.h - the trained checkpoints' heldout.json (16 held-out
 * sequences of 256 token ids with Hugging Face's fp32 log-probabilities and
 * perplexities), read for the tests that score them. */
#ifndef FG_TESTS_HELDOUT_H
#define FG_TESTS_HELDOUT_H

#include <stdint.h>

#define HROWS 16
#define HLEN 256

struct heldout {
	int32_t ids[HROWS][HLEN];
	double lp[HROWS][HLEN - 1];   /* Hugging Face, fp32: log p(ids[t+1] | ids[..t]) */
	double ppl, sim_ppl;          /* fp32; 4-bit weights simulated in PyTorch */
};

/* dir/heldout.json into h; a check failure when it is missing or malformed. */
void load_heldout(const char *dir, struct heldout *h);

#endif
