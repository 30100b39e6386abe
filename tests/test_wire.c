/* tests/test_wire.c - requests, results and run counts as bytes
 * (core/request/wire.h), what rank 0 sends its replicas and gets back.
 * Round trips compared field by field, floats bit for bit (a NaN's payload
 * too): requests with a text prompt, with token ids, with every array NULL
 * and every one empty, numbers at their limits; full results (top arrays of
 * 3 a position), an error result, top arrays of 0 a position; run counts
 * through the wire and added.  Then hostile bytes: every truncation of each
 * message is refused (-EPROTO, the reader where it was, nothing allocated:
 * the sanitizer build checks leaks), random bit flips parse or are refused,
 * counts larger than the bytes, a NUL inside a string, the wrong kind of
 * message. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/request/wire.h"
#include "core/util/error.h"
#include "tests/test_rng.h"

static void on_token(void *arg, int32_t id)
{
	(void)arg;
	(void)id;
}

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Two arrays alike: both NULL, or both not with the same bytes. */
static void same_mem(const void *a, const void *b, size_t bytes, const char *what)
{
	ck_assert_msg((a == NULL) == (b == NULL), "%s: NULL on one side only", what);
	if (a && bytes)
		ck_assert_msg(memcmp(a, b, bytes) == 0, "%s differs", what);
}

static void same_str(const char *a, const char *b, const char *what)
{
	ck_assert_msg((a == NULL) == (b == NULL), "%s: NULL on one side only", what);
	if (a)
		ck_assert_msg(strcmp(a, b) == 0, "%s: \"%s\" came as \"%s\"", what, a, b);
}

/* What came (b) against what went (a), field by field. */
static void same_request(const struct fg_request *a, const struct fg_request *b, int streams)
{
	same_str(a->prompt, b->prompt, "prompt");
	same_mem(a->prompt_ids, b->prompt_ids, a->n_prompt_ids * sizeof(int32_t), "prompt_ids");
	ck_assert_uint_eq(b->n_prompt_ids, a->prompt_ids ? a->n_prompt_ids : 0);
	ck_assert_int_eq(b->max_new_tokens, a->max_new_tokens);
	ck_assert_uint_eq(bits(b->temperature), bits(a->temperature));
	ck_assert_int_eq(b->top_k, a->top_k);
	ck_assert_uint_eq(bits(b->top_p), bits(a->top_p));
	ck_assert_uint_eq(b->seed, a->seed);
	same_mem(a->stop_ids, b->stop_ids, a->n_stop_ids * sizeof(int32_t), "stop_ids");
	ck_assert_uint_eq(b->n_stop_ids, a->stop_ids ? a->n_stop_ids : 0);
	ck_assert((a->stop == NULL) == (b->stop == NULL));
	ck_assert_uint_eq(b->n_stop, a->stop ? a->n_stop : 0);
	for (size_t i = 0; a->stop && i < a->n_stop; i++)
		same_str(a->stop[i], b->stop[i], "stop string");
	ck_assert_int_eq(b->logprobs, a->logprobs);
	ck_assert_int_eq(b->score_prompt, a->score_prompt);
	ck_assert_int_eq(b->top_logprobs, a->top_logprobs);
	ck_assert_int_eq(streams, a->on_token != NULL);
	ck_assert_ptr_null(b->on_token);
	ck_assert_ptr_null(b->on_token_arg);
	ck_assert_int_eq(b->known, a->known);
}

static void same_result(const struct fg_result *a, const struct fg_result *b, int k)
{
	size_t np = a->n_prompt_tokens, nt = a->n_tokens;

	same_str(a->text, b->text, "text");
	ck_assert_uint_eq(b->n_tokens, nt);
	ck_assert_uint_eq(b->n_prompt_tokens, np);
	ck_assert_int_eq(b->finish_reason, a->finish_reason);
	same_str(a->error, b->error, "error");
	ck_assert_int_eq(b->refused, a->refused);
	same_mem(a->token_ids, b->token_ids, nt * sizeof(int32_t), "token_ids");
	same_mem(a->prompt_ids, b->prompt_ids, np * sizeof(int32_t), "prompt_ids");
	same_mem(a->prompt_logprobs, b->prompt_logprobs, np * sizeof(float), "prompt_logprobs");
	same_mem(a->token_logprobs, b->token_logprobs, nt * sizeof(float), "token_logprobs");
	ck_assert((a->prompt_top == NULL) == (b->prompt_top == NULL));
	ck_assert((a->token_top == NULL) == (b->token_top == NULL));
	for (size_t i = 0; a->prompt_top && i < np * (size_t)k; i++) {
		ck_assert_int_eq(b->prompt_top[i].id, a->prompt_top[i].id);
		ck_assert_uint_eq(bits(b->prompt_top[i].logprob), bits(a->prompt_top[i].logprob));
	}
	for (size_t i = 0; a->token_top && i < nt * (size_t)k; i++) {
		ck_assert_int_eq(b->token_top[i].id, a->token_top[i].id);
		ck_assert_uint_eq(bits(b->token_top[i].logprob), bits(a->token_top[i].logprob));
	}
}

/* ---- the messages the tests send ---- */

static const char *const stops[] = { "\n\n", "", "END", NULL, "ü\t" };
static const int32_t ids[] = { 0, -1, INT32_MAX, INT32_MIN, 50256, 2 };
static const int32_t stop_ids[] = { 2, INT32_MIN, 7 };

static struct fg_request text_request(void)
{
	return (struct fg_request){
		.prompt = "Once upon a time, ünïcode",
		.max_new_tokens = INT_MAX,
		.temperature = -0.0f,
		.top_k = -7,
		.top_p = 1.5f,
		.seed = UINT64_MAX,
		.stop_ids = stop_ids,
		.n_stop_ids = 3,
		.stop = stops,
		.n_stop = 5,
		.logprobs = 1,
		.score_prompt = -1,
		.top_logprobs = 99, /* out of range: fg_run's to refuse */
		.on_token = on_token,
		.on_token_arg = (void *)&ids,
		.known = 1,
	};
}

static struct fg_request ids_request(void)
{
	return (struct fg_request){
		.prompt_ids = ids,
		.n_prompt_ids = 6,
		.max_new_tokens = INT_MIN,
		.temperature = from_bits(0x7fa00001), /* a signalling NaN */
		.top_k = INT_MAX,
		.top_p = from_bits(1),                /* the least denormal */
		.seed = 0x8000000000000001ull,
		.stop_ids = stop_ids,
		.n_stop_ids = 1,
		.score_prompt = 1,
		.top_logprobs = FG_TOP_LOGPROBS_MAX,
		.known = INT_MIN,
	};
}

enum { NP = 4, NT = 3, K = 3 };
static int32_t r_tokens[NT] = { 11, INT32_MAX, 0 };
static int32_t r_prompt[NP] = { 2, 100, 200, 300 };
static float r_plp[NP], r_tlp[NT] = { -0.5f, -INFINITY, -1e-30f };
static struct fg_logprob r_ptop[NP * K], r_ttop[NT * K];

static struct fg_result full_result(void)
{
	r_plp[0] = from_bits(0xffc12345); /* a NaN with a sign and a payload */
	r_plp[1] = -2.25f;
	r_plp[2] = -0.0f;
	r_plp[3] = from_bits(0x7f800001);
	for (int i = 0; i < NP * K; i++)
		r_ptop[i] = (struct fg_logprob){ i < K ? -1 : i * 1000, i < K ? NAN : -(float)i / 7 };
	for (int i = 0; i < NT * K; i++)
		r_ttop[i] = (struct fg_logprob){ INT32_MIN + i, -(float)i / 3 };
	return (struct fg_result){
		.text = "hello wörld\n",
		.token_ids = r_tokens,
		.n_tokens = NT,
		.n_prompt_tokens = NP,
		.finish_reason = FG_FINISH_STOP,
		.prompt_ids = r_prompt,
		.prompt_logprobs = r_plp,
		.prompt_top = r_ptop,
		.token_logprobs = r_tlp,
		.token_top = r_ttop,
	};
}

static struct fg_result error_result(void)
{
	return (struct fg_result){
		.n_prompt_tokens = 7,
		.finish_reason = FG_FINISH_ERROR,
		.error = "prompt of 7 tokens + 9 new tokens exceeds opt's 8 positions",
		.refused = 1,
	};
}

/* The run counts' 8-byte fields in their order: 24 counts, 3 peaks, 4 seconds. */
#define SLOTS (sizeof(struct fg_run_stats) / 8)
enum { SUMS = 24, PEAKS = 3 };

static struct fg_run_stats slots_stats(const uint64_t v[SLOTS])
{
	struct fg_run_stats s;

	memcpy(&s, v, sizeof(s));
	return s;
}

static void stats_slots(const struct fg_run_stats *s, uint64_t v[SLOTS])
{
	memcpy(v, s, sizeof(*s));
}

static struct fg_run_stats some_stats(void)
{
	uint64_t v[SLOTS];

	for (size_t i = 0; i < SLOTS; i++)
		v[i] = 0x0102030405060708ull * (i + 1) ^ (uint64_t)i << 56;
	v[SLOTS - 1] = 0x7ff8000000000abcull; /* callback_s a NaN */
	return slots_stats(v);
}

/* ---- round trips ---- */

/* r through the wire and back, compared. */
static void request_round_trip(const struct fg_request *r)
{
	struct fg_wire w = { 0 };
	struct fg_request got;
	int streams = -1;

	ck_assert_int_eq(fg_wire_put_request(&w, r), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_msg(fg_wire_get_request(&rd, &got, &streams) == 0, "%s", fg_last_error());
	ck_assert_uint_eq(rd.at, w.len);
	same_request(r, &got, streams);
	fg_wire_request_free(&got);
	ck_assert_ptr_null(got.prompt);
	fg_wire_free(&w);
	ck_assert_ptr_null(w.buf);
}

START_TEST(request_text)
{
	struct fg_request r = text_request();

	request_round_trip(&r);
}
END_TEST

START_TEST(request_ids)
{
	struct fg_request r = ids_request();

	request_round_trip(&r);
}
END_TEST

/* NULL and empty arrays stay apart; a NULL array's count does not travel. */
START_TEST(request_null_and_empty)
{
	static const int32_t none[1];
	static const char *const no_stop[1];
	struct fg_request nul = { .prompt = NULL, .n_prompt_ids = 5, .n_stop_ids = 3, .n_stop = 2 };
	struct fg_request empty = {
		.prompt = "", .prompt_ids = none, .stop_ids = none, .stop = no_stop,
	};
	struct fg_wire w = { 0 };
	struct fg_request got;
	int streams;

	request_round_trip(&empty);
	ck_assert_int_eq(fg_wire_put_request(&w, &empty), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_request(&rd, &got, &streams), 0);
	ck_assert(got.prompt && got.prompt[0] == '\0');
	ck_assert(got.prompt_ids && got.stop_ids && got.stop);
	ck_assert(!got.n_prompt_ids && !got.n_stop_ids && !got.n_stop);
	fg_wire_request_free(&got);
	fg_wire_free(&w);

	ck_assert_int_eq(fg_wire_put_request(&w, &nul), 0);
	rd = (struct fg_wire_reader){ w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_request(&rd, &got, &streams), 0);
	ck_assert(!got.prompt && !got.prompt_ids && !got.stop_ids && !got.stop);
	ck_assert(!got.n_prompt_ids && !got.n_stop_ids && !got.n_stop);
	ck_assert_int_eq(streams, 0);
	fg_wire_request_free(&got);
	fg_wire_free(&w);
}
END_TEST

static void result_round_trip(const struct fg_result *r, int k)
{
	struct fg_wire w = { 0 };
	struct fg_result got;

	ck_assert_int_eq(fg_wire_put_result(&w, r, k), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_msg(fg_wire_get_result(&rd, &got) == 0, "%s", fg_last_error());
	ck_assert_uint_eq(rd.at, w.len);
	same_result(r, &got, k);
	fg_result_clear(&got);
	fg_wire_free(&w);
}

START_TEST(result_full)
{
	struct fg_result r = full_result();
	struct fg_wire w = { 0 };
	struct fg_result got;

	result_round_trip(&r, K);
	/* the NaN's bits, by name */
	ck_assert_int_eq(fg_wire_put_result(&w, &r, K), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_result(&rd, &got), 0);
	ck_assert_uint_eq(bits(got.prompt_logprobs[0]), 0xffc12345u);
	ck_assert_uint_eq(bits(got.prompt_logprobs[3]), 0x7f800001u);
	ck_assert_int_eq(got.prompt_top[K - 1].id, -1);
	ck_assert_int_eq(got.token_top[0].id, INT32_MIN);
	fg_result_clear(&got);
	fg_wire_free(&w);
}
END_TEST

START_TEST(result_error)
{
	struct fg_result r = error_result();
	struct fg_wire w = { 0 };
	struct fg_result got;

	result_round_trip(&r, 0);
	ck_assert_int_eq(fg_wire_put_result(&w, &r, 5), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_result(&rd, &got), 0);
	ck_assert(!got.text && !got.token_ids && !got.prompt_ids && !got.prompt_logprobs &&
		  !got.prompt_top && !got.token_logprobs && !got.token_top);
	ck_assert_uint_eq(got.n_prompt_tokens, 7);
	ck_assert_uint_eq(got.n_tokens, 0);
	fg_result_clear(&got);
	fg_wire_free(&w);
}
END_TEST

/* top_logprobs 0: the top arrays prepare.c makes are there and empty. */
START_TEST(result_no_tops)
{
	struct fg_result r = full_result();
	struct fg_wire w = { 0 };
	struct fg_result got;

	result_round_trip(&r, 0);
	ck_assert_int_eq(fg_wire_put_result(&w, &r, 0), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_result(&rd, &got), 0);
	ck_assert(got.prompt_top && got.token_top);
	fg_result_clear(&got);
	ck_assert_int_eq(fg_wire_put_result(&w, &r, FG_TOP_LOGPROBS_MAX + 1), -EINVAL);
	ck_assert_int_eq(fg_wire_put_result(&w, &r, -1), -EINVAL);
	fg_wire_free(&w);
}
END_TEST

START_TEST(stats_round_trip)
{
	struct fg_run_stats s = some_stats(), got;
	struct fg_wire w = { 0 };

	ck_assert_uint_eq(sizeof(s), (SUMS + PEAKS + 4) * 8); /* a new field: wire.c's list */
	ck_assert_int_eq(fg_wire_put_stats(&w, &s), 0);
	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_stats(&rd, &got), 0);
	ck_assert_uint_eq(rd.at, w.len);
	ck_assert_uint_eq(w.len, 1 + sizeof(s));
	ck_assert_uint_eq(got.requests, s.requests);
	ck_assert_uint_eq(got.peak_bytes[2], s.peak_bytes[2]);
	ck_assert_uint_eq(got.read_bytes[1], s.read_bytes[1]);
	ck_assert(memcmp(&got, &s, sizeof(s)) == 0); /* every field, the NaN's bits too */
	fg_wire_free(&w);
}
END_TEST

START_TEST(stats_add)
{
	uint64_t a[SLOTS], b[SLOTS], c[SLOTS];
	double sa[4] = { 1.5, 0, 1e-9, 3 }, sb[4] = { 2.25, 7, 1e-9, -1 };

	for (size_t i = 0; i < SUMS + PEAKS; i++) {
		a[i] = 1000 * (i + 1) + (i % 2 ? 5000000 : 0);
		b[i] = 7 * (i + 1) + (i % 3 ? 0 : 9000000);
	}
	memcpy(a + SUMS + PEAKS, sa, sizeof(sa));
	memcpy(b + SUMS + PEAKS, sb, sizeof(sb));
	struct fg_run_stats d = slots_stats(a), s = slots_stats(b);

	fg_run_stats_add(&d, &s);
	stats_slots(&d, c);
	for (size_t i = 0; i < SUMS; i++)
		ck_assert_msg(c[i] == a[i] + b[i], "count %zu", i);
	for (size_t i = SUMS; i < SUMS + PEAKS; i++)
		ck_assert_msg(c[i] == (a[i] > b[i] ? a[i] : b[i]), "peak %zu", i - SUMS);
	ck_assert(d.run_setup_s == 3.75 && d.compute_s == 7 && d.logits_s == 2e-9 &&
		  d.callback_s == 2);
	ck_assert_uint_eq(d.peak_bytes[0], s.peak_bytes[0]); /* 9000175 > 25000 */
	ck_assert_uint_eq(d.peak_bytes[1], 5026000);

	/* added to itself */
	d = slots_stats(a);
	fg_run_stats_add(&d, &d);
	ck_assert_uint_eq(d.requests, 2 * a[0]);
	ck_assert_uint_eq(d.peak_bytes[0], a[SUMS]);
}
END_TEST

/* Messages one after another, as one buffer carries them. */
START_TEST(many_in_one_buffer)
{
	struct fg_request q1 = text_request(), q2 = ids_request(), gq;
	struct fg_result r1 = full_result(), r2 = error_result(), gr;
	struct fg_run_stats s = some_stats(), gs;
	struct fg_wire w = { 0 };
	uint64_t n;
	int streams;

	ck_assert_int_eq(fg_wire_put_u64(&w, 2), 0);
	ck_assert_int_eq(fg_wire_put_request(&w, &q1), 0);
	ck_assert_int_eq(fg_wire_put_request(&w, &q2), 0);
	ck_assert_int_eq(fg_wire_put_result(&w, &r1, K), 0);
	ck_assert_int_eq(fg_wire_put_result(&w, &r2, 0), 0);
	ck_assert_int_eq(fg_wire_put_stats(&w, &s), 0);
	ck_assert_int_eq(fg_wire_put_u64(&w, 0xfedcba9876543210ull), 0);
	ck_assert_uint_eq(w.buf[0], 2);
	ck_assert_uint_eq(w.buf[w.len - 1], 0xfe);

	struct fg_wire_reader rd = { w.buf, w.len, 0 };
	ck_assert_int_eq(fg_wire_get_u64(&rd, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(fg_wire_get_request(&rd, &gq, &streams), 0);
	same_request(&q1, &gq, streams);
	fg_wire_request_free(&gq);
	ck_assert_int_eq(fg_wire_get_request(&rd, &gq, &streams), 0);
	same_request(&q2, &gq, streams);
	fg_wire_request_free(&gq);
	ck_assert_int_eq(fg_wire_get_result(&rd, &gr), 0);
	same_result(&r1, &gr, K);
	fg_result_clear(&gr);
	ck_assert_int_eq(fg_wire_get_result(&rd, &gr), 0);
	same_result(&r2, &gr, 0);
	fg_result_clear(&gr);
	ck_assert_int_eq(fg_wire_get_stats(&rd, &gs), 0);
	ck_assert(memcmp(&gs, &s, sizeof(s)) == 0);
	ck_assert_int_eq(fg_wire_get_u64(&rd, &n), 0);
	ck_assert_uint_eq(n, 0xfedcba9876543210ull);
	ck_assert_uint_eq(rd.at, w.len);
	ck_assert_int_eq(fg_wire_get_u64(&rd, &n), -EPROTO);
	fg_wire_free(&w);
}
END_TEST

START_TEST(oom_sticks)
{
	struct fg_wire w = { 0 };
	struct fg_request q = text_request();
	struct fg_run_stats s = some_stats();

	ck_assert_int_eq(fg_wire_put_u64(&w, 1), 0);
	w.oom = 1;
	ck_assert_int_eq(fg_wire_put_u64(&w, 1), -ENOMEM);
	ck_assert_int_eq(fg_wire_put_request(&w, &q), -ENOMEM);
	ck_assert_int_eq(fg_wire_put_stats(&w, &s), -ENOMEM);
	ck_assert_uint_eq(w.len, 8);
	fg_wire_free(&w);
	ck_assert(!w.buf && !w.len && !w.cap && !w.oom);
}
END_TEST

/* ---- hostile bytes ---- */

enum kind { REQUEST, RESULT, STATS, U64 };
#define MESSAGES 7

/* Message m, its kind. */
static enum kind message(int m, struct fg_wire *w)
{
	struct fg_request q;
	struct fg_result r;
	struct fg_run_stats s;

	memset(w, 0, sizeof(*w));
	switch (m) {
	case 0:
		q = text_request();
		ck_assert_int_eq(fg_wire_put_request(w, &q), 0);
		return REQUEST;
	case 1:
		q = ids_request();
		ck_assert_int_eq(fg_wire_put_request(w, &q), 0);
		return REQUEST;
	case 2:
		r = full_result();
		ck_assert_int_eq(fg_wire_put_result(w, &r, K), 0);
		return RESULT;
	case 3:
		r = full_result();
		ck_assert_int_eq(fg_wire_put_result(w, &r, 0), 0);
		return RESULT;
	case 4:
		r = error_result();
		ck_assert_int_eq(fg_wire_put_result(w, &r, 2), 0);
		return RESULT;
	case 5:
		s = some_stats();
		ck_assert_int_eq(fg_wire_put_stats(w, &s), 0);
		return STATS;
	default:
		ck_assert_int_eq(fg_wire_put_u64(w, 42), 0);
		return U64;
	}
}

static int zeroed(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* Parse p[0, n) as kind k: the return code; a parse freed, a failure
 * checked (nothing out, the reader where it was, a line). */
static int parse(enum kind k, const unsigned char *p, size_t n)
{
	struct fg_wire_reader rd = { p, n, 0 };
	struct fg_request q;
	struct fg_result r;
	struct fg_run_stats s;
	uint64_t v;
	int rc, streams = 7;

	fg_clear_error();
	switch (k) {
	case REQUEST:
		rc = fg_wire_get_request(&rd, &q, &streams);
		if (rc)
			ck_assert(zeroed(&q, sizeof(q)) && streams == 0);
		fg_wire_request_free(&q);
		break;
	case RESULT:
		rc = fg_wire_get_result(&rd, &r);
		if (rc)
			ck_assert(zeroed(&r, sizeof(r)));
		fg_result_clear(&r);
		break;
	case STATS:
		rc = fg_wire_get_stats(&rd, &s);
		if (rc)
			ck_assert(zeroed(&s, sizeof(s)));
		break;
	default:
		rc = fg_wire_get_u64(&rd, &v);
		break;
	}
	if (rc) {
		ck_assert_int_eq(rc, -EPROTO);
		ck_assert_uint_eq(rd.at, 0);
		ck_assert_msg(strncmp(fg_last_error(), "replica message: ", 17) == 0 &&
			      strstr(fg_last_error(), " at byte "), "%s", fg_last_error());
	} else {
		ck_assert_uint_le(rd.at, n);
	}
	return rc;
}

/* Each cut of each message, in a buffer of the cut's own size (the address
 * sanitizer sees a read past it). */
START_TEST(truncations_refused)
{
	for (int m = 0; m < MESSAGES; m++) {
		struct fg_wire w;
		enum kind k = message(m, &w);

		for (size_t n = 0; n < w.len; n++) {
			unsigned char *cut = malloc(n ? n : 1);

			memcpy(cut, w.buf, n);
			ck_assert_msg(parse(k, cut, n) == -EPROTO, "message %d cut at %zu", m, n);
			free(cut);
		}
		ck_assert_int_eq(parse(k, w.buf, w.len), 0);
		fg_wire_free(&w);
	}
}
END_TEST

START_TEST(flips_never_crash)
{
	int refused = 0, parsed = 0;

	for (int m = 0; m < MESSAGES; m++) {
		struct fg_wire w;
		enum kind k = message(m, &w);
		unsigned char *b = malloc(w.len);

		for (int t = 0; t < 4000; t++) {
			memcpy(b, w.buf, w.len);
			for (int f = 1 + (int)rnd_below(4); f > 0; f--)
				b[rnd_below(w.len)] ^= (unsigned char)(1u << rnd_below(8));
			if (parse(k, b, w.len))
				refused++;
			else
				parsed++;
		}
		free(b);
		fg_wire_free(&w);
	}
	ck_assert(refused > 0 && parsed > 0);
	/* bytes at random, of every kind */
	for (int t = 0; t < 20000; t++) {
		size_t n = rnd_below(64);
		unsigned char *b = malloc(n ? n : 1);

		rnd_fill(b, n);
		if (n && t % 2)
			b[0] = "QRS"[t % 3];
		parse((enum kind)(t % 4), b, n);
		free(b);
	}
}
END_TEST

/* Bytes of a message: the request's tag and a count of 1000 stop ids. */
START_TEST(counts_beyond_the_bytes)
{
	struct fg_request q = { .prompt = "x" };
	struct fg_wire w = { 0 };

	ck_assert_int_eq(fg_wire_put_request(&w, &q), 0);
	/* tag, prompt (8 + 1), prompt_ids (8), then max_new_tokens */
	size_t at = 1 + 9;
	w.buf[at] = 0xe9; /* a count of 1000 (+ 1) */
	w.buf[at + 1] = 0x03;
	ck_assert_int_eq(parse(REQUEST, w.buf, w.len), -EPROTO);
	ck_assert_msg(strstr(fg_last_error(), "prompt_ids") && strstr(fg_last_error(), "at byte 10"),
		      "%s", fg_last_error());
	/* the largest count: no allocation tried */
	memset(w.buf + at, 0xff, 8);
	ck_assert_int_eq(parse(REQUEST, w.buf, w.len), -EPROTO);
	fg_wire_free(&w);
}
END_TEST

START_TEST(nul_in_a_string)
{
	struct fg_request q = { .prompt = "abc" };
	struct fg_result r = { .text = "ok", .error = "b-d" };
	struct fg_wire w = { 0 };
	unsigned char *x;

	ck_assert_int_eq(fg_wire_put_request(&w, &q), 0);
	x = memchr(w.buf, 'b', w.len);
	*x = 0;
	ck_assert_int_eq(parse(REQUEST, w.buf, w.len), -EPROTO);
	ck_assert_msg(strstr(fg_last_error(), "NUL") && strstr(fg_last_error(), "at byte 10"),
		      "%s", fg_last_error());
	fg_wire_free(&w);

	ck_assert_int_eq(fg_wire_put_result(&w, &r, 0), 0);
	x = memchr(w.buf, '-', w.len);
	*x = 0;
	ck_assert_int_eq(parse(RESULT, w.buf, w.len), -EPROTO);
	fg_wire_free(&w);
}
END_TEST

START_TEST(out_of_range)
{
	struct fg_result r = error_result();
	struct fg_request q = { .prompt = "" };
	struct fg_wire w = { 0 };
	/* tag, text (NULL: 8), n_tokens, n_prompt_tokens, then finish_reason */
	size_t why = 1 + 8 + 8 + 8, k = why + 4 + 8 + sizeof(r.error[0]) * strlen(r.error) + 4;

	ck_assert_int_eq(fg_wire_put_result(&w, &r, 0), 0);
	w.buf[why] = 3;
	ck_assert_int_eq(parse(RESULT, w.buf, w.len), -EPROTO);
	ck_assert_msg(strstr(fg_last_error(), "finish_reason 3"), "%s", fg_last_error());
	w.buf[why] = FG_FINISH_ERROR;
	ck_assert_int_eq(parse(RESULT, w.buf, w.len), 0);
	w.buf[k] = FG_TOP_LOGPROBS_MAX + 1;
	ck_assert_int_eq(parse(RESULT, w.buf, w.len), -EPROTO);
	ck_assert_msg(strstr(fg_last_error(), "top_logprobs 21"), "%s", fg_last_error());
	w.buf[k] = FG_TOP_LOGPROBS_MAX;
	ck_assert_int_eq(parse(RESULT, w.buf, w.len), 0);
	fg_wire_free(&w);

	/* the on_token flag: 0 or 1 */
	ck_assert_int_eq(fg_wire_put_request(&w, &q), 0);
	w.buf[w.len - 5] = 2;
	ck_assert_int_eq(parse(REQUEST, w.buf, w.len), -EPROTO);
	fg_wire_free(&w);
}
END_TEST

/* A full result's top arrays must hold positions x top_logprobs. */
START_TEST(top_counts_checked)
{
	struct fg_result r = full_result();
	struct fg_wire w = { 0 };
	size_t k;

	ck_assert_int_eq(fg_wire_put_result(&w, &r, K), 0);
	/* tag, text, n_tokens, n_prompt_tokens, finish_reason, error (NULL), refused */
	k = 1 + 8 + strlen(r.text) + 8 + 8 + 4 + 8 + 4;
	ck_assert_uint_eq(w.buf[k], K);
	w.buf[k] = K - 1;
	ck_assert_int_eq(parse(RESULT, w.buf, w.len), -EPROTO);
	ck_assert_msg(strstr(fg_last_error(), "prompt_top"), "%s", fg_last_error());
	fg_wire_free(&w);
}
END_TEST

START_TEST(wrong_kind)
{
	for (int m = 0; m < MESSAGES - 1; m++) {
		struct fg_wire w;
		enum kind k = message(m, &w);

		for (enum kind o = REQUEST; o <= STATS; o++)
			if (o != k)
				ck_assert_int_eq(parse(o, w.buf, w.len), -EPROTO);
		fg_wire_free(&w);
	}
	ck_assert(strstr(fg_last_error(), "not a") && strstr(fg_last_error(), "at byte 0"));
}
END_TEST

static Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("round_trips");

	tcase_add_test(tc, request_text);
	tcase_add_test(tc, request_ids);
	tcase_add_test(tc, request_null_and_empty);
	tcase_add_test(tc, result_full);
	tcase_add_test(tc, result_error);
	tcase_add_test(tc, result_no_tops);
	tcase_add_test(tc, stats_round_trip);
	tcase_add_test(tc, stats_add);
	tcase_add_test(tc, many_in_one_buffer);
	tcase_add_test(tc, oom_sticks);
	suite_add_tcase(s, tc);
	tc = tcase_create("hostile_bytes");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, truncations_refused);
	tcase_add_test(tc, flips_never_crash);
	tcase_add_test(tc, counts_beyond_the_bytes);
	tcase_add_test(tc, nul_in_a_string);
	tcase_add_test(tc, out_of_range);
	tcase_add_test(tc, top_counts_checked);
	tcase_add_test(tc, wrong_kind);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wire_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
