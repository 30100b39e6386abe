/* core/tokenizer/bpe.c - byte-pair merging of one pre-token.
 *
 * The result is that of GPT-2's reference loop: while some adjacent pair has
 * a merge rank, take the pair with the lowest rank and merge all of its
 * occurrences, left to right and without overlap, in one pass.  Short words
 * run that loop on arrays with cached pair ranks; long ones use a heap of
 * (rank, position), taking all entries of the lowest rank as one pass so that
 * pairs formed during a pass wait for the next, as in the reference.
 * Symbols are byte tokens (byte-level BPE) or, for a tokenizer.json without
 * ByteLevel, character, <0xXX> byte-fallback and unk tokens.  Hugging Face's
 * loop (one merge at a time by (rank, position)) gives the same result on
 * every merges list in which no merge forms a pair ranked before itself,
 * which is what its trainer writes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

#define SMALL_WORD 48
#define NO_RANK UINT32_MAX

static void pair_of(const struct fg_tokenizer *t, int32_t a, int32_t b, uint32_t *rank,
		    int32_t *merged)
{
	const struct fg_pair_slot *s = fg_pairmap_find(&t->merges, a, b);

	*rank = s ? s->rank : NO_RANK;
	*merged = s ? s->merged : -1;
}

/* Merges the n symbols of init (which may be out) and returns the number of
 * ids written to out. */
static size_t bpe_small(const struct fg_tokenizer *t, const int32_t *init, size_t n,
			int32_t *out)
{
	int32_t ids[SMALL_WORD], mrg[SMALL_WORD], nids[SMALL_WORD];
	uint32_t rank[SMALL_WORD], nrank[SMALL_WORD];
	uint8_t changed[SMALL_WORD];
	size_t src[SMALL_WORD];

	memcpy(ids, init, n * sizeof(*ids));
	for (size_t i = 0; i + 1 < n; i++)
		pair_of(t, ids[i], ids[i + 1], &rank[i], &mrg[i]);
	while (n > 1) {
		uint32_t best = NO_RANK;
		size_t m = 0;

		for (size_t i = 0; i + 1 < n; i++)
			if (rank[i] < best)
				best = rank[i];
		if (best == NO_RANK)
			break;
		/* One pass: merge every occurrence of the best pair. */
		for (size_t i = 0; i < n; m++) {
			if (i + 1 < n && rank[i] == best) {
				nids[m] = mrg[i];
				changed[m] = 1;
				i += 2;
			} else {
				nids[m] = ids[i];
				changed[m] = 0;
				src[m] = i;
				i++;
			}
		}
		/* Pairs of two untouched symbols keep their cached rank. */
		for (size_t j = 0; j + 1 < m; j++) {
			if (changed[j] || changed[j + 1]) {
				pair_of(t, nids[j], nids[j + 1], &nrank[j], &mrg[j]);
			} else {
				nrank[j] = rank[src[j]];
				mrg[j] = mrg[src[j]];
			}
		}
		memcpy(ids, nids, m * sizeof(*ids));
		memcpy(rank, nrank, (m ? m - 1 : 0) * sizeof(*rank));
		n = m;
	}
	memcpy(out, ids, n * sizeof(*ids));
	return n;
}

/* Heap of (rank << 32 | position), smallest first. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
	size_t i = (*n)++;

	while (i > 0 && h[(i - 1) / 2] > v) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
	uint64_t top = h[0], v = h[--*n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1] < h[c])
			c++;
		if (h[c] >= v)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = v;
	return top;
}

struct heap_mem {
	int32_t *id;	/* -1 once merged into its left neighbour */
	int32_t *prev, *next;
	uint64_t *heap;	/* room for 3n: n - 1 pairs + 2 per merge */
	struct fg_bpe_scratch *sc;	/* ->later: pairs held back during a pass */
};

static int scratch_get(struct fg_bpe_scratch *sc, size_t n, struct heap_mem *m)
{
	size_t per = 3 * sizeof(int32_t) + 3 * sizeof(uint64_t);

	if (n > sc->cap) {
		void *p;

		if (n > SIZE_MAX / per)
			return -ENOMEM;
		p = realloc(sc->mem, n * per);
		if (!p)
			return -ENOMEM;
		sc->mem = p;
		sc->cap = n;
	}
	m->heap = sc->mem;
	m->id = (int32_t *)(m->heap + 3 * n);
	m->prev = m->id + n;
	m->next = m->prev + n;
	m->sc = sc;
	return 0;
}

void fg_bpe_scratch_free(struct fg_bpe_scratch *sc)
{
	free(sc->mem);
	free(sc->later);
	memset(sc, 0, sizeof(*sc));
}

static int push_pair(const struct fg_tokenizer *t, struct heap_mem *m, size_t *hn,
		     int32_t left, uint32_t pass_rank)
{
	struct fg_bpe_scratch *sc = m->sc;
	const struct fg_pair_slot *s;
	int32_t right;
	uint64_t v;

	if (left < 0 || (right = m->next[left]) < 0)
		return 0;
	s = fg_pairmap_find(&t->merges, m->id[left], m->id[right]);
	if (!s)
		return 0;
	v = (uint64_t)s->rank << 32 | (uint32_t)left;
	if (s->rank >= pass_rank) {
		heap_push(m->heap, hn, v);
		return 0;
	}
	/* Only a merges file whose ranks contradict its own order builds a
	 * pair ranked below the pass that formed it: it waits for the pass
	 * to end, as in the reference loop. */
	if (sc->nlater == sc->later_cap) {
		size_t cap = sc->later_cap ? sc->later_cap * 2 : 64;
		uint64_t *p = realloc(sc->later, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		sc->later = p;
		sc->later_cap = cap;
	}
	sc->later[sc->nlater++] = v;
	return 0;
}

static int bpe_heap(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc,
		    const int32_t *init, size_t n, int32_t *out, size_t *nout)
{
	struct heap_mem m;
	size_t hn = 0;
	int rc;

	if (n > INT32_MAX / 4) {
		FG_ERR("tokenizer: a pre-token of %zu bytes is too long to encode", n);
		return -EINVAL;
	}
	rc = scratch_get(sc, n, &m);
	if (rc)
		return rc;
	sc->nlater = 0;
	for (size_t i = 0; i < n; i++) {
		m.id[i] = init[i];
		m.prev[i] = (int32_t)i - 1;
		m.next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++)
		push_pair(t, &m, &hn, (int32_t)i, 0);
	while (hn) {
		uint32_t r = (uint32_t)(m.heap[0] >> 32);

		/* One pass: every entry of rank r, left to right. */
		while (hn && (uint32_t)(m.heap[0] >> 32) == r) {
			int32_t left = (int32_t)(uint32_t)heap_pop(m.heap, &hn), right;
			const struct fg_pair_slot *s;

			right = m.next[left];
			if (m.id[left] < 0 || right < 0)
				continue;
			s = fg_pairmap_find(&t->merges, m.id[left], m.id[right]);
			if (!s || s->rank != r)
				continue;	/* stale: the pair changed since */
			m.id[left] = s->merged;
			m.id[right] = -1;
			m.next[left] = m.next[right];
			if (m.next[right] >= 0)
				m.prev[m.next[right]] = left;
			rc = push_pair(t, &m, &hn, m.prev[left], r);
			if (!rc)
				rc = push_pair(t, &m, &hn, left, r);
			if (rc)
				return rc;
		}
		while (sc->nlater)
			heap_push(m.heap, &hn, sc->later[--sc->nlater]);
	}
	for (int32_t i = 0; i >= 0; i = m.next[i])
		out[(*nout)++] = m.id[i];
	return 0;
}

int fg_bpe_merge(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc, int32_t *out,
		 size_t *nout, size_t n, int use_heap)
{
	int32_t *init = out + *nout;

	if (n <= 1) {
		*nout += n;
		return 0;
	}
	if (!use_heap && n <= SMALL_WORD) {
		*nout += bpe_small(t, init, n, init);
		return 0;
	}
	return bpe_heap(t, sc, init, n, out, nout);
}

int fg_bpe_word(const struct fg_tokenizer *t, struct fg_bpe_scratch *sc,
		const unsigned char *w, size_t n, int32_t *out, size_t *nout, int use_heap)
{
	int32_t *init = out + *nout;

	for (size_t i = 0; i < n; i++)
		init[i] = t->byte_id[w[i]];
	return fg_bpe_merge(t, sc, out, nout, n, use_heap);
}
