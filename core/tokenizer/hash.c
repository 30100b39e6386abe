/* core/tokenizer/hash.c - open-addressing tables: token text -> id, merge pair -> rank. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tok_internal.h"

/* Capacity: a power of two at least twice `expect` (load factor <= 1/2). */
static size_t table_cap(size_t expect)
{
	size_t cap = 16;

	while (cap < expect * 2)
		cap <<= 1;
	return cap;
}

uint32_t fg_tok_hash(const char *s, size_t len)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, s + i, 8);
		h = fg_tok_mix64(h ^ w);
	}
	if (i < len) {
		uint64_t w = 0;

		memcpy(&w, s + i, len - i);
		h = fg_tok_mix64(h ^ w ^ 0x5bd1e995u);
	}
	return (uint32_t)(h ^ (h >> 32));
}

int fg_strmap_init(struct fg_strmap *m, size_t expect)
{
	m->cap = table_cap(expect);
	m->count = 0;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	m->hashes = calloc(m->cap, sizeof(*m->hashes));
	if (!m->slots || !m->hashes) {
		fg_strmap_free(m);
		return -ENOMEM;
	}
	return 0;
}

void fg_strmap_free(struct fg_strmap *m)
{
	free(m->slots);
	free(m->hashes);
	m->slots = NULL;
	m->hashes = NULL;
	m->cap = m->count = 0;
}

static void strmap_place(uint32_t *slots, uint32_t *hashes, size_t cap, uint32_t h,
			 uint32_t slot)
{
	size_t i = h & (cap - 1);

	while (slots[i])
		i = (i + 1) & (cap - 1);
	slots[i] = slot;
	hashes[i] = h;
}

static int strmap_grow(struct fg_strmap *m)
{
	size_t cap = m->cap * 2;
	uint32_t *slots = calloc(cap, sizeof(*slots));
	uint32_t *hashes = calloc(cap, sizeof(*hashes));

	if (!slots || !hashes) {
		free(slots);
		free(hashes);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i])
			strmap_place(slots, hashes, cap, m->hashes[i], m->slots[i]);
	free(m->slots);
	free(m->hashes);
	m->slots = slots;
	m->hashes = hashes;
	m->cap = cap;
	return 0;
}

int fg_strmap_insert(struct fg_tokenizer *t, int32_t id)
{
	struct fg_strmap *m = &t->vocab;
	const struct fg_tok_str *s = &t->text[id];

	if ((m->count + 1) * 2 > m->cap) {
		int rc = strmap_grow(m);

		if (rc)
			return rc;
	}
	strmap_place(m->slots, m->hashes, m->cap, fg_tok_hash(t->blob + s->off, s->len),
		     (uint32_t)id + 1);
	m->count++;
	return 0;
}

int32_t fg_strmap_find(const struct fg_tokenizer *t, const char *s, size_t len)
{
	const struct fg_strmap *m = &t->vocab;
	uint32_t h;
	size_t i;

	if (!m->cap)
		return -1;
	h = fg_tok_hash(s, len);
	for (i = h & (m->cap - 1); m->slots[i]; i = (i + 1) & (m->cap - 1)) {
		int32_t id = (int32_t)(m->slots[i] - 1);
		const struct fg_tok_str *e = &t->text[id];

		if (m->hashes[i] == h && e->len == len && !memcmp(t->blob + e->off, s, len))
			return id;
	}
	return -1;
}

int fg_pairmap_init(struct fg_pairmap *m, size_t expect)
{
	m->cap = table_cap(expect);
	m->shift = 64;
	for (size_t c = m->cap; c > 1; c >>= 1)
		m->shift--;
	m->count = 0;
	m->slots = malloc(m->cap * sizeof(*m->slots));
	if (!m->slots)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++)
		m->slots[i].key = UINT64_MAX;
	return 0;
}

void fg_pairmap_free(struct fg_pairmap *m)
{
	free(m->slots);
	m->slots = NULL;
	m->cap = m->count = 0;
}

void fg_pairmap_set(struct fg_pairmap *m, int32_t left, int32_t right, uint32_t rank,
		    int32_t merged)
{
	uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
	size_t i = fg_pair_hash(key, m->shift);

	while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key)
		i = (i + 1) & (m->cap - 1);
	if (m->slots[i].key == UINT64_MAX)
		m->count++;
	m->slots[i].key = key;
	m->slots[i].rank = rank;
	m->slots[i].merged = merged;
}
