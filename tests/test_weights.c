/* tests/test_weights.c - weight sources: safetensors (single, sharded), FlexGen .npy
 * folders, dummy weights, dtype conversion, and malformed files giving clear errors. */
#define _GNU_SOURCE /* nftw */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fgcore/half.h>

#include "core/model/dummy.h"
#include "core/model/npy.h"
#include "core/arch/arch.h"
#include "core/model/weights.h"
#include "core/util/error.h"
#include "tests/test_tmpdir.h"

/* ---- temp folders -------------------------------------------------------- */

static void tmp_setup(void)
{
	tmp_make("fg_wt");
}

/* <tmp>/<name>, created as a folder. */
static const char *tmp_dir(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", tmp_root, name);
	mkdir(buf, 0700);
	return buf;
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *fmt, ...)
{
	char path[512], text[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	ck_assert(n >= 0 && (size_t)n < sizeof(text));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	write_file(path, text, (size_t)n);
}

/* ---- a tiny OPT: vocab 32, hidden 8, 2 heads, 2 layers, ffn 16, 6 positions ---- */

#define TV 32
#define TH 8
#define TL 2
#define TF 16
#define TP 6

static void write_tiny_config(const char *dir)
{
	write_text(dir, "config.json",
		   "{\"model_type\": \"opt\", \"vocab_size\": %d, \"hidden_size\": %d,"
		   " \"num_attention_heads\": 2, \"num_hidden_layers\": %d, \"ffn_dim\": %d,"
		   " \"max_position_embeddings\": %d, \"do_layer_norm_before\": true,"
		   " \"word_embed_proj_dim\": %d, \"activation_function\": \"relu\"}",
		   TV, TH, TL, TF, TP, TH);
}

static void tiny_config(struct fg_model_config *c)
{
	memset(c, 0, sizeof(*c));
	c->vocab = TV;
	c->hidden = TH;
	c->heads = 2;
	c->layers = TL;
	c->ffn = TF;
	c->max_pos = TP;
	/* what the OPT family derives from these */
	c->arch = &fg_arch_opt;
	c->kv_heads = c->heads;
	c->head_dim = TH / 2;
	c->pos_rows = TP + 2;
}

/* Exact in fp16: multiples of 1/128 below 1 in magnitude. */
static float tiny_value(int64_t tensor, int64_t i)
{
	return (float)((tensor * 37 + i * 11) % 193 - 96) / 128.0f;
}

/* ---- a safetensors writer with hooks to break it ---------------------------- */

struct ent {
	char name[128];
	char dtype[16];
	int rank;
	int64_t shape[4];
	int64_t begin, end;
	unsigned char *bytes; /* owned */
	size_t nbytes;
	char raw[256]; /* when set: the entry's JSON value verbatim */
};

struct ckpt {
	struct ent e[128];
	int n;
};

static size_t dtype_size(const char *d)
{
	if (!strcmp(d, "F32") || !strcmp(d, "I32"))
		return 4;
	if (!strcmp(d, "F64") || !strcmp(d, "I64"))
		return 8;
	if (!strcmp(d, "I8") || !strcmp(d, "U8") || !strncmp(d, "F8", 2))
		return 1;
	return 2;
}

static struct ent *ck_add(struct ckpt *c, const char *name, const char *dtype, int rank,
			  int64_t d0, int64_t d1, const void *bytes, size_t nbytes)
{
	struct ent *e = &c->e[c->n++];

	ck_assert_int_le(c->n, 128);
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", name);
	snprintf(e->dtype, sizeof(e->dtype), "%s", dtype);
	e->rank = rank;
	e->shape[0] = d0;
	e->shape[1] = d1;
	e->bytes = malloc(nbytes ? nbytes : 1);
	ck_assert_ptr_nonnull(e->bytes);
	if (nbytes)
		memcpy(e->bytes, bytes, nbytes);
	e->nbytes = nbytes;
	return e;
}

static void ck_free(struct ckpt *c)
{
	for (int i = 0; i < c->n; i++)
		free(c->e[i].bytes);
	c->n = 0;
}

/* Encode tensor idx of the tiny model in dtype "F16", "F32" or "BF16". */
static void encode_tiny(int64_t idx, int64_t n, const char *dtype, unsigned char *out)
{
	for (int64_t i = 0; i < n; i++) {
		float v = tiny_value(idx, i);

		if (!strcmp(dtype, "F32")) {
			memcpy(out + 4 * i, &v, 4);
		} else {
			uint16_t h = !strcmp(dtype, "BF16") ? (uint16_t)(fg_float_to_bits(v) >> 16)
							     : fg_float_to_half(v);

			memcpy(out + 2 * i, &h, 2);
		}
	}
}

/* Every tensor of the tiny model, named prefix + canonical name; dtype_of(idx)
 * picks each one's dtype (NULL: all F16). */
static void ck_tiny(struct ckpt *c, const char *prefix, const char *(*dtype_of)(int64_t))
{
	struct fg_model_config cfg;
	int64_t i, r, cols;
	int rank;

	tiny_config(&cfg);
	c->n = 0;
	for (i = 0; i < fg_arch_tensor_count(&cfg); i++) {
		char name[128], full[160];
		const char *dt = dtype_of ? dtype_of(i) : "F16";
		unsigned char *buf;
		size_t nb;

		ck_assert_int_eq(fg_arch_tensor_info(&cfg, i, name, sizeof(name), &rank, &r,
							&cols),
				 0);
		nb = (size_t)(r * cols) * dtype_size(dt);
		buf = malloc(nb);
		ck_assert_ptr_nonnull(buf);
		encode_tiny(i, r * cols, dt, buf);
		snprintf(full, sizeof(full), "%s%s", prefix, name);
		ck_add(c, full, dt, rank, rank == 2 ? r : cols, cols, buf, nb);
		free(buf);
	}
}

static int ck_find(const struct ckpt *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->e[i].name, name))
			return i;
	ck_abort_msg("no tensor %s in the test checkpoint", name);
	return -1;
}

/* Consecutive offsets in entry order; sizes from dtype and shape. */
static void ck_layout(struct ckpt *c)
{
	int64_t off = 0;

	for (int i = 0; i < c->n; i++) {
		struct ent *e = &c->e[i];
		int64_t n = 1;

		for (int k = 0; k < e->rank; k++)
			n *= e->shape[k];
		e->begin = off;
		e->end = off + n * (int64_t)dtype_size(e->dtype);
		off = e->end;
	}
}

/* JSON header for entries [from, to). */
static char *ck_header(const struct ckpt *c, int from, int to)
{
	size_t cap = 65536, used = 0;
	char *h = malloc(cap);

	ck_assert_ptr_nonnull(h);
	used += (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (int i = from; i < to; i++) {
		const struct ent *e = &c->e[i];

		if (e->raw[0]) {
			used += (size_t)snprintf(h + used, cap - used, ",\"%s\":%s", e->name, e->raw);
			continue;
		}
		used += (size_t)snprintf(h + used, cap - used, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
					 e->name, e->dtype);
		for (int k = 0; k < e->rank; k++)
			used += (size_t)snprintf(h + used, cap - used, "%s%lld", k ? "," : "",
						 (long long)e->shape[k]);
		used += (size_t)snprintf(h + used, cap - used, "],\"data_offsets\":[%lld,%lld]}",
					 (long long)e->begin, (long long)e->end);
		ck_assert_uint_lt(used, cap);
	}
	snprintf(h + used, cap - used, "}");
	return h;
}

/* Write entries [from, to) (offsets relative to entry `from`'s layout start)
 * with `header` (NULL: generated) and the 8-byte length `hlen` (0: real). */
static void ck_write_range(const char *path, struct ckpt *c, int from, int to,
			   const char *header, uint64_t hlen)
{
	char *gen = header ? NULL : ck_header(c, from, to);
	const char *h = header ? header : gen;
	size_t n = strlen(h), padded = (n + 7) & ~(size_t)7, data = 0;
	unsigned char *buf;
	uint64_t len = hlen ? hlen : padded;

	for (int i = from; i < to; i++)
		if (!c->e[i].raw[0] && (size_t)c->e[i].end > data)
			data = (size_t)c->e[i].end;
	buf = calloc(1, 8 + padded + data);
	ck_assert_ptr_nonnull(buf);
	for (int k = 0; k < 8; k++)
		buf[k] = (unsigned char)(len >> (8 * k));
	memcpy(buf + 8, h, n);
	memset(buf + 8 + n, ' ', padded - n);
	for (int i = from; i < to; i++) {
		const struct ent *e = &c->e[i];
		size_t room;

		if (e->raw[0] || e->begin < 0 || e->end <= e->begin || (size_t)e->begin >= data)
			continue;
		room = (size_t)e->end - (size_t)e->begin;
		memcpy(buf + 8 + padded + e->begin, e->bytes, room < e->nbytes ? room : e->nbytes);
	}
	write_file(path, buf, 8 + padded + data);
	free(buf);
	free(gen);
}

static void ck_write(const char *path, struct ckpt *c)
{
	ck_write_range(path, c, 0, c->n, NULL, 0);
}

/* Read every tensor of an open tiny model and compare with its encoding as
 * F16 (what F32/BF16 inputs of tiny_value convert to: they are exact). */
static void check_tiny_values(struct fg_weights *w)
{
	struct fg_model_config cfg;
	int64_t i, r, cols;
	int rank;

	tiny_config(&cfg);
	for (i = 0; i < fg_arch_tensor_count(&cfg); i++) {
		char name[128];
		uint16_t got[TV * TH], want[TV * TH];

		fg_arch_tensor_info(&cfg, i, name, sizeof(name), &rank, &r, &cols);
		ck_assert_int_le(r * cols, TV * TH);
		memset(got, 0xee, sizeof(got));
		ck_assert_msg(fg_weights_read_f16(w, name, got, r, cols) == 0, "%s: %s", name,
			      fg_last_error());
		encode_tiny(i, r * cols, "F16", (unsigned char *)want);
		ck_assert_msg(memcmp(got, want, (size_t)(r * cols) * 2) == 0, "tensor %s differs",
			      name);
	}
}

/* Open `dir`, expecting rc and an error containing every needle. */
static void expect_open_error(const char *dir, int rc, ...)
{
	struct fg_model_config cfg;
	struct fg_weights *w = (void *)1;
	const char *needle;
	va_list ap;
	int got;

	fg_clear_error();
	got = fg_weights_open(dir, &cfg, &w);
	ck_assert_msg(got == rc, "%s: open gave %d (want %d): %s", dir, got, rc,
		      fg_last_error());
	ck_assert_ptr_null(w);
	va_start(ap, rc);
	while ((needle = va_arg(ap, const char *)))
		ck_assert_msg(strstr(fg_last_error(), needle), "error \"%s\" lacks \"%s\"",
			      fg_last_error(), needle);
	va_end(ap);
	ck_assert_msg(!strchr(fg_last_error(), '\n'), "error is not one line");
}

/* ---- the reference checkpoint ------------------------------------------------ */

/* Find "name":{... "data_offsets":[b,e]} in a compact header, independently of the reader. */
static int raw_offsets(const char *hdr, const char *name, uint64_t *b, uint64_t *e)
{
	char key[200];
	const char *p;
	unsigned long long x, y;

	snprintf(key, sizeof(key), "\"%s\"", name);
	p = strstr(hdr, key);
	if (!p || !(p = strstr(p, "\"data_offsets\"")))
		return -1;
	p += strlen("\"data_offsets\"");
	if (sscanf(p, " : [ %llu , %llu ]", &x, &y) != 2)
		return -1;
	*b = x;
	*e = y;
	return 0;
}

START_TEST(test_reference_checkpoint)
{
	static const struct {
		const char *hf, *ours;
		int64_t row0, nrows, cols;
	} probes[] = {
		{ "model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight", 50270, 2, 64 },
		{ "model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight", 2, 3, 64 },
		{ "model.decoder.embed_positions.weight", "decoder.embed_positions.weight", 2048, 2,
		  64 },
		{ "model.decoder.layers.1.fc2.weight", "decoder.layers.1.fc2.weight", 60, 4, 256 },
		{ "model.decoder.layers.0.self_attn.q_proj.bias",
		  "decoder.layers.0.self_attn.q_proj.bias", 0, 1, 64 },
		{ "model.decoder.final_layer_norm.weight", "decoder.final_layer_norm.weight", 0, 1,
		  64 },
	};
	const char *td = getenv("FGCORE_TESTDATA");
	char dir[512], path[600];
	struct fg_model_config cfg;
	struct fg_weights *w;
	unsigned char len8[8];
	uint64_t hlen = 0;
	char *hdr;
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/opt/opt-tiny-64x2", td);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_assert_msg(access(path, R_OK) == 0, "FGCORE_TESTDATA is set but %s is missing", path);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_str_eq(cfg.name, "opt-tiny-64x2");
	ck_assert_int_eq(cfg.hidden, 64);
	ck_assert_int_eq(cfg.layers, 2);

	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(len8, 1, 8, f), 8);
	for (int k = 7; k >= 0; k--)
		hlen = hlen << 8 | len8[k];
	ck_assert_uint_lt(hlen, 1 << 20);
	hdr = calloc(1, hlen + 1);
	ck_assert_ptr_nonnull(hdr);
	ck_assert_uint_eq(fread(hdr, 1, hlen, f), hlen);

	for (size_t p = 0; p < sizeof(probes) / sizeof(probes[0]); p++) {
		int64_t n = probes[p].nrows * probes[p].cols;
		uint16_t *got = malloc((size_t)n * 2), *raw = malloc((size_t)n * 2);
		uint64_t b, e;

		ck_assert_int_eq(raw_offsets(hdr, probes[p].hf, &b, &e), 0);
		ck_assert_int_eq(fseek(f, (long)(8 + hlen + b + (uint64_t)(probes[p].row0 *
									     probes[p].cols) * 2),
				       SEEK_SET),
				 0);
		ck_assert_uint_eq(fread(raw, 2, (size_t)n, f), (size_t)n);
		ck_assert_msg(fg_weights_read_rows_f16(w, probes[p].ours, probes[p].row0,
						       probes[p].nrows, probes[p].cols, got) == 0,
			      "%s", fg_last_error());
		ck_assert_msg(memcmp(got, raw, (size_t)n * 2) == 0, "%s rows %lld.. differ",
			      probes[p].ours, (long long)probes[p].row0);
		/* The reference's random weights are finite and modest (|v| < 5.2). */
		for (int64_t i = 0; i < n; i++) {
			float v = fg_half_to_float(got[i]);

			ck_assert(isfinite(v) && fabsf(v) < 16.0f);
		}
		free(got);
		free(raw);
	}
	/* The 1-D tensor through the whole-tensor call, and the "model." spelling. */
	{
		uint16_t a[64], b[64];

		ck_assert_int_eq(fg_weights_read_f16(w, "decoder.final_layer_norm.bias", a, 1, 64),
				 0);
		ck_assert_int_eq(
			fg_weights_read_f16(w, "model.decoder.final_layer_norm.bias", b, 1, 64), 0);
		ck_assert_mem_eq(a, b, sizeof(a));
	}
	free(hdr);
	fclose(f);
	fg_weights_close(w);

	snprintf(dir, sizeof(dir), "%s/opt/opt-tiny-128x4", td);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_int_eq(cfg.hidden, 128);
	ck_assert_int_eq(cfg.layers, 4);
	fg_weights_close(w);
}
END_TEST

/* ---- written checkpoints ------------------------------------------------------ */

START_TEST(test_single_file)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	struct ckpt c;
	char dir[400], path[500];
	uint16_t junk[TF * TH] = { 0 };
	uint16_t buf[TV * TH], row[3 * TH];
	int64_t big = 0;

	tmp_dir("opt-tiny", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	/* Ignored: the tied lm_head, layers the config does not have, unknown
	 * names (even in dtypes the model could not use). */
	ck_add(&c, "lm_head.weight", "F16", 2, TV, TH, junk, sizeof(junk));
	ck_add(&c, "model.decoder.layers.2.fc1.weight", "F16", 2, TF, TH, junk, sizeof(junk));
	ck_add(&c, "model.decoder.layers.01.fc1.weight", "F16", 2, TF, TH, junk, sizeof(junk));
	ck_add(&c, "model.decoder.version", "I64", 1, 1, 0, &big, 8);
	ck_layout(&c);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_write(path, &c);
	ck_free(&c);

	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_str_eq(cfg.name, "opt-tiny");
	ck_assert_int_eq(cfg.vocab, TV);
	ck_assert_int_eq(cfg.max_pos, TP);
	check_tiny_values(w);

	/* Row ranges agree with the whole tensor. */
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.embed_tokens.weight", buf, TV, TH), 0);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 29, 3, TH, row),
			 0);
	ck_assert_mem_eq(row, buf + 29 * TH, sizeof(row));
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 32, 0, TH, row),
			 0);

	/* Misuse is an error, not a wild read. */
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 30, 3, TH, row),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "outside its 32 rows"));
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", -1, 1, TH, row),
			 -EINVAL);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.embed_tokens.weight", buf, TH, TV),
			 -EINVAL);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.fc1.bias", buf, 1, TH), -EINVAL);
	ck_assert_int_eq(fg_weights_read_f16(w, "lm_head.weight", buf, TV, TH), -ENOENT);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.2.fc1.bias", buf, 1, TF), -ENOENT);
	fg_weights_close(w);

	/* Names without the "model." prefix are the same tensors. */
	tmp_dir("plain", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "", NULL);
	ck_layout(&c);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_write(path, &c);
	ck_free(&c);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	check_tiny_values(w);
	fg_weights_close(w);
}
END_TEST

static const char *dtype_mixed(int64_t idx)
{
	return idx % 3 == 0 ? "F32" : idx % 3 == 1 ? "BF16" : "F16";
}

static const char *dtype_f32(int64_t idx)
{
	(void)idx;
	return "F32";
}

static const char *dtype_bf16(int64_t idx)
{
	(void)idx;
	return "BF16";
}

/* F32 and BF16 convert to fp16 with round-to-nearest-even. */
START_TEST(test_convert)
{
	/* fc1.bias of layer 0 (16 values, F32) and fc2.bias of layer 1 (8 values, BF16). */
	static const struct {
		uint32_t in;
		uint16_t out;
	} f32[TF] = {
		{ 0x3f800000, 0x3c00 }, /* 1 */
		{ 0x3f801000, 0x3c00 }, /* 1 + 2^-11: tie, to even 1 */
		{ 0x3f803000, 0x3c02 }, /* 1 + 3 * 2^-11: tie, to even 1 + 2^-9 */
		{ 0x3f801001, 0x3c01 }, /* just above the tie */
		{ 0x3f800fff, 0x3c00 }, /* just below the tie */
		{ 0xbf801000, 0xbc00 }, /* negative tie */
		{ 0x477fe000, 0x7bff }, /* 65504, the largest half */
		{ 0x477fefff, 0x7bff }, /* just below 65520 */
		{ 0x477fd000, 0x7bfe }, /* 65488: tie, to even 65472 (65520 and up: test_nonfinite) */
		{ 0x33800000, 0x0001 }, /* 2^-24, the smallest subnormal */
		{ 0x33000000, 0x0000 }, /* 2^-25: tie, to even 0 */
		{ 0x33c00000, 0x0002 }, /* 1.5 * 2^-24: tie, to even 2 */
		{ 0x34200000, 0x0002 }, /* 2.5 * 2^-24: tie, to even 2 */
		{ 0x387fe000, 0x0400 }, /* 1023.5 * 2^-24: tie, up to the smallest normal */
		{ 0x3089705f, 0x0000 }, /* 1e-9 */
		{ 0x80000000, 0x8000 }, /* -0 */
	};
	static const struct {
		uint16_t in, out;
	} bf16[TH] = {
		{ 0x3f80, 0x3c00 }, /* 1 */
		{ 0xbf81, 0xbc08 }, /* -(1 + 2^-7) */
		{ 0xc77f, 0xfbf8 }, /* -65280 (65536 and up: test_nonfinite) */
		{ 0x477f, 0x7bf8 }, /* 65280 */
		{ 0x3380, 0x0001 }, /* 2^-24 */
		{ 0x3300, 0x0000 }, /* 2^-25: tie, to even 0 */
		{ 0x33c0, 0x0002 }, /* 1.5 * 2^-24: tie, to even 2 */
		{ 0x3340, 0x0001 }, /* 0.75 * 2^-24 */
	};
	const char *(*kinds[])(int64_t) = { dtype_mixed, dtype_f32, dtype_bf16 };
	struct fg_model_config cfg;
	struct fg_weights *w;
	struct ckpt c;
	char dir[400], path[500], name[32];
	uint16_t got[TF];
	int k, i;

	for (k = 0; k < 3; k++) {
		snprintf(name, sizeof(name), "conv%d", k);
		tmp_dir(name, dir, sizeof(dir));
		write_tiny_config(dir);
		ck_tiny(&c, "model.", kinds[k]);
		ck_layout(&c);
		snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		ck_write(path, &c);
		ck_free(&c);
		ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
		check_tiny_values(w);
		fg_weights_close(w);
	}

	tmp_dir("ties", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	i = ck_find(&c, "model.decoder.layers.0.fc1.bias");
	snprintf(c.e[i].dtype, sizeof(c.e[i].dtype), "F32");
	free(c.e[i].bytes);
	c.e[i].bytes = malloc(sizeof(uint32_t) * TF);
	ck_assert_ptr_nonnull(c.e[i].bytes);
	for (int j = 0; j < TF; j++)
		memcpy(c.e[i].bytes + 4 * j, &f32[j].in, 4);
	c.e[i].nbytes = 4 * TF;
	i = ck_find(&c, "model.decoder.layers.1.fc2.bias");
	snprintf(c.e[i].dtype, sizeof(c.e[i].dtype), "BF16");
	for (int j = 0; j < TH; j++)
		memcpy(c.e[i].bytes + 2 * j, &bf16[j].in, 2);
	ck_layout(&c);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_write(path, &c);
	ck_free(&c);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.fc1.bias", got, 1, TF), 0);
	for (i = 0; i < TF; i++)
		ck_assert_msg(got[i] == f32[i].out, "F32 0x%08x -> 0x%04x, want 0x%04x",
			      f32[i].in, got[i], f32[i].out);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.layers.0.fc1.bias", 0, 1, TF, got),
			 0);
	ck_assert_uint_eq(got[2], 0x3c02);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.1.fc2.bias", got, 1, TH), 0);
	for (i = 0; i < TH; i++)
		ck_assert_msg(got[i] == bf16[i].out, "BF16 0x%04x -> 0x%04x, want 0x%04x",
			      bf16[i].in, got[i], bf16[i].out);
	fg_weights_close(w);
}
END_TEST

/* A tensor holding NaN or an infinity - stored so, or beyond fp16's range
 * (65520 rounds to infinity) - is refused when read, naming the file, the
 * tensor and the first bad element: the model would compute NaN. */
START_TEST(test_nonfinite)
{
	static const struct {
		const char *dtype;
		uint32_t bits; /* the value's encoding in dtype */
		const char *what;
	} bad[] = {
		{ "F32", 0x477ff000, "an infinity at [0, 5] (the stored value is beyond fp16's 65504)" },
		{ "BF16", 0xff80, "an infinity at [0, 5] (the stored value is beyond fp16's 65504)" },
		{ "F16", 0x7e00, "NaN at [0, 5]" },
		{ "F16", 0xfc00, "an infinity at [0, 5]: " },
	};
	struct fg_model_config cfg;
	struct fg_weights *w;
	struct ckpt c;
	char dir[400], path[500], name[32];
	uint16_t got[TF];

	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		snprintf(name, sizeof(name), "nonfinite%zu", k);
		tmp_dir(name, dir, sizeof(dir));
		write_tiny_config(dir);
		ck_tiny(&c, "model.", NULL);
		int i = ck_find(&c, "model.decoder.layers.0.fc1.bias");
		size_t es = dtype_size(bad[k].dtype);
		snprintf(c.e[i].dtype, sizeof(c.e[i].dtype), "%s", bad[k].dtype);
		free(c.e[i].bytes);
		c.e[i].bytes = calloc(TF, es);
		ck_assert_ptr_nonnull(c.e[i].bytes);
		memcpy(c.e[i].bytes + 5 * es, &bad[k].bits, es); /* little-endian */
		c.e[i].nbytes = TF * es;
		ck_layout(&c);
		snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		ck_write(path, &c);
		ck_free(&c);
		ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
		ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.fc1.bias", got, 1, TF),
				 -EINVAL);
		ck_assert_msg(strstr(fg_last_error(), "decoder.layers.0.fc1.bias") &&
				      strstr(fg_last_error(), bad[k].what) &&
				      strstr(fg_last_error(), "model.safetensors"),
			      "%s: '%s'", bad[k].dtype, fg_last_error());
		/* the other tensors read as ever */
		ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.1.fc2.bias", got, 1, 8), 0);
		fg_weights_close(w);
	}
}
END_TEST

/* A large F32 tensor crosses the reader's conversion chunks. */
START_TEST(test_convert_large)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	char dir[400];
	struct ckpt c;
	char path[500];
	const int64_t vocab = 5000, hid = 8;
	float *v = malloc((size_t)(vocab * hid) * 4);
	uint16_t *got = malloc((size_t)(vocab * hid) * 2);
	int i;

	tmp_dir("large", dir, sizeof(dir));
	write_text(dir, "config.json",
		   "{\"model_type\": \"opt\", \"vocab_size\": %lld, \"hidden_size\": %lld,"
		   " \"num_attention_heads\": 2, \"num_hidden_layers\": %d, \"ffn_dim\": %d,"
		   " \"max_position_embeddings\": %d}",
		   (long long)vocab, (long long)hid, TL, TF, TP);
	ck_tiny(&c, "model.", NULL);
	i = ck_find(&c, "model.decoder.embed_tokens.weight");
	for (int64_t j = 0; j < vocab * hid; j++)
		v[j] = (float)(j % 2001 - 1000) / 1024.0f; /* exact in fp16 */
	free(c.e[i].bytes);
	c.e[i].bytes = (unsigned char *)v;
	c.e[i].nbytes = (size_t)(vocab * hid) * 4;
	snprintf(c.e[i].dtype, sizeof(c.e[i].dtype), "F32");
	c.e[i].shape[0] = vocab;
	ck_layout(&c);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_write(path, &c);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.embed_tokens.weight", got, vocab, hid), 0);
	for (int64_t j = 0; j < vocab * hid; j++)
		ck_assert_msg(fg_half_to_float(got[j]) == v[j], "element %lld", (long long)j);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 1234, 2000,
						  hid, got),
			 0);
	for (int64_t j = 0; j < 2000 * hid; j++)
		ck_assert(fg_half_to_float(got[j]) == v[1234 * hid + j]);
	fg_weights_close(w);
	ck_free(&c);
	free(got);
}
END_TEST

/* Shards listed in model.safetensors.index.json. */
static void write_sharded(const char *dir, struct ckpt *c, int split, const char *map_extra,
			  const char *file1_override)
{
	char path[500], *index, *p;
	size_t cap = 65536, used = 0;
	int64_t base;

	/* Shard 2's offsets start at 0. */
	ck_layout(c);
	base = c->e[split].begin;
	for (int i = split; i < c->n; i++) {
		c->e[i].begin -= base;
		c->e[i].end -= base;
	}
	snprintf(path, sizeof(path), "%s/model-00001-of-00002.safetensors", dir);
	ck_write_range(path, c, 0, split, NULL, 0);
	snprintf(path, sizeof(path), "%s/model-00002-of-00002.safetensors", dir);
	ck_write_range(path, c, split, c->n, NULL, 0);

	index = malloc(cap);
	ck_assert_ptr_nonnull(index);
	used += (size_t)snprintf(index, cap,
				 "{\"metadata\": {\"total_size\": 1234},\n \"weight_map\": {");
	for (int i = 0; i < c->n; i++) {
		const char *file = i < split ? "model-00001-of-00002.safetensors"
					     : "model-00002-of-00002.safetensors";

		if (i == 0 && file1_override)
			file = file1_override;
		used += (size_t)snprintf(index + used, cap - used, "%s\n  \"%s\": \"%s\"",
					 i ? "," : "", c->e[i].name, file);
	}
	snprintf(index + used, cap - used, "%s}}\n", map_extra ? map_extra : "");
	p = index;
	write_text(dir, "model.safetensors.index.json", "%s", p);
	free(index);
}

START_TEST(test_sharded)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	struct ckpt c;
	char dir[400];

	tmp_dir("sharded", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", dtype_mixed);
	write_sharded(dir, &c, 19,
		      ",\n  \"lm_head.weight\": \"model-00002-of-00002.safetensors\"", NULL);
	ck_free(&c);
	/* A stray single file is not used when an index exists. */
	write_text(dir, "model.safetensors", "garbage");
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	check_tiny_values(w);
	fg_weights_close(w);
}
END_TEST

START_TEST(test_sharded_bad)
{
	struct ckpt c;
	char dir[400];

	/* Shard names must stay inside the folder. */
	tmp_dir("escape", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	write_sharded(dir, &c, 10, NULL, "../x");
	expect_open_error(dir, -EINVAL, "model.safetensors.index.json", "\"../x\"",
			  "plain file names", NULL);
	ck_free(&c);

	tmp_dir("escape2", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	write_sharded(dir, &c, 10, ",\n \"unused.tensor\": \"/etc/passwd\"", NULL);
	expect_open_error(dir, -EINVAL, "\"/etc/passwd\"", "plain file names", NULL);
	ck_free(&c);

	/* A tensor the index maps to a shard that lacks it. */
	tmp_dir("wrongshard", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	write_sharded(dir, &c, 10, NULL, "model-00002-of-00002.safetensors");
	expect_open_error(dir, -ENOENT, "model-00002-of-00002.safetensors",
			  "\"model.decoder.embed_tokens.weight\" is missing", NULL);
	ck_free(&c);

	/* A tensor absent from weight_map. */
	tmp_dir("notinmap", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	snprintf(c.e[ck_find(&c, "model.decoder.layers.1.fc1.bias")].name, 128, "something.else");
	write_sharded(dir, &c, 10, NULL, NULL);
	expect_open_error(dir, -ENOENT, "model.safetensors.index.json",
			  "\"decoder.layers.1.fc1.bias\" is missing from weight_map", NULL);
	ck_free(&c);

	/* A shard that does not exist. */
	tmp_dir("noshard", dir, sizeof(dir));
	write_tiny_config(dir);
	ck_tiny(&c, "model.", NULL);
	write_sharded(dir, &c, 10, NULL, "model-00003-of-00002.safetensors");
	expect_open_error(dir, -ENOENT, "model-00003-of-00002.safetensors", "cannot open", NULL);
	ck_free(&c);

	/* index.json that is not an index. */
	tmp_dir("badindex", dir, sizeof(dir));
	write_tiny_config(dir);
	write_text(dir, "model.safetensors.index.json", "{\"weight_map\": [1, 2]}");
	expect_open_error(dir, -EINVAL, "\"weight_map\" is missing or not a JSON object", NULL);
	write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": 3}}");
	expect_open_error(dir, -EINVAL, "weight_map[\"a\"] is not a string", NULL);
	write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {");
	expect_open_error(dir, -EINVAL, "model.safetensors.index.json:1:", "not valid JSON",
			  NULL);
}
END_TEST

/* ---- malformed safetensors ----------------------------------------------------- */

enum mut {
	M_SHORT, M_HLEN_BEYOND, M_HLEN_HUGE, M_HLEN_ONE, M_NOT_JSON, M_ARRAY, M_TRUNCATED,
	M_OFFSET_PAST_END, M_OVERLAP, M_SPAN, M_NEG_DIM, M_OVERFLOW, M_UNKNOWN_DTYPE,
	M_UNSUPPORTED_DTYPE, M_F64, M_WRONG_SHAPE, M_WRONG_RANK, M_MISSING, M_DUPLICATE,
	M_OFFSETS_TYPE, M_ENTRY_TYPE, M_METADATA, M_HIGH_RANK, M_REVERSED, M_NUL_HEADER,
	M_POSITIONS, M_COUNT
};

struct mut_case {
	const char *what;
	int rc;
	const char *needle[3];
};

static const struct mut_case mut_cases[M_COUNT] = {
	[M_SHORT] = { "file < 8 bytes", -EINVAL, { "shorter than the 8-byte header length" } },
	[M_HLEN_BEYOND] = { "header length beyond file", -EINVAL,
			    { "goes beyond the end of the file" } },
	[M_HLEN_HUGE] = { "header length 2^63", -EINVAL, { "header length 9223372036854775808" } },
	[M_HLEN_ONE] = { "header length 1", -EINVAL, { "header length 1 is outside [2," } },
	[M_NOT_JSON] = { "header not JSON", -EINVAL, { "header is not valid JSON" } },
	[M_ARRAY] = { "header an array", -EINVAL, { "header is not a JSON object" } },
	[M_TRUNCATED] = { "truncated file", -EINVAL,
			  { "past the end of the data area", "truncated" } },
	[M_OFFSET_PAST_END] = { "offsets past end", -EINVAL,
				{ "\"model.decoder.layers.0.fc1.weight\"",
				  "past the end of the data area" } },
	[M_OVERLAP] = { "overlapping tensors", -EINVAL,
			{ "\"model.decoder.layers.0.fc1.weight\"", "overlap" } },
	[M_SPAN] = { "span != shape", -EINVAL,
		     { "\"model.decoder.layers.0.fc1.weight\"",
		       "data_offsets span 254 bytes but F16 shape needs 256" } },
	[M_NEG_DIM] = { "negative dim", -EINVAL,
			{ "\"model.decoder.layers.0.fc1.weight\"",
			  "shape[0] is not a non-negative integer" } },
	[M_OVERFLOW] = { "element count overflow", -EINVAL, { "\"huge\"", "overflows" } },
	[M_UNKNOWN_DTYPE] = { "unknown dtype", -EINVAL,
			      { "\"model.decoder.layers.0.fc1.weight\"", "unknown dtype \"F17\"" } },
	[M_UNSUPPORTED_DTYPE] = { "I16 dtype", -ENOTSUP,
				  { "\"model.decoder.layers.0.fc1.weight\"", "has dtype I16",
				    "only F16, BF16 and F32" } },
	[M_F64] = { "F64 dtype", -ENOTSUP,
		    { "\"model.decoder.final_layer_norm.bias\"", "has dtype F64" } },
	[M_WRONG_SHAPE] = { "shape vs config", -EINVAL,
			    { "\"model.decoder.layers.0.fc1.weight\"", "has shape [8, 16]",
			      "needs [16, 8]" } },
	[M_POSITIONS] = { "positions without the offset 2", -EINVAL,
			  { "\"model.decoder.embed_positions.weight\"", "has shape [6, 8]",
			    "needs [8, 8]" } },
	[M_WRONG_RANK] = { "rank vs config", -EINVAL,
			   { "\"model.decoder.layers.1.fc1.bias\"", "has shape [1, 16]",
			     "needs [16]" } },
	[M_MISSING] = { "missing tensor", -ENOENT,
			{ "tensor \"decoder.layers.1.fc2.bias\" is missing" } },
	[M_DUPLICATE] = { "tensor twice", -EINVAL,
			  { "stored twice", "\"decoder.layers.0.fc1.bias\"" } },
	[M_OFFSETS_TYPE] = { "data_offsets wrong", -EINVAL,
			     { "\"model.decoder.layers.0.fc1.weight\"",
			       "\"data_offsets\" must be [begin, end]" } },
	[M_ENTRY_TYPE] = { "entry not an object", -EINVAL,
			   { "\"model.decoder.layers.0.fc1.weight\"",
			     "header entry is not a JSON object" } },
	[M_METADATA] = { "__metadata__ not an object", -EINVAL,
			 { "\"__metadata__\" is not a JSON object" } },
	[M_HIGH_RANK] = { "rank 9", -EINVAL,
			  { "\"model.decoder.layers.0.fc1.weight\"", "rank 9 is above" } },
	[M_REVERSED] = { "end before begin", -EINVAL,
			 { "\"model.decoder.layers.0.fc1.weight\"",
			   "are not an ascending non-negative range" } },
	[M_NUL_HEADER] = { "\\u0000 in a name", -EINVAL, { "header is not valid JSON" } },
};

START_TEST(test_malformed_safetensors)
{
	const struct mut_case *m = &mut_cases[_i];
	char dir[400], path[500], name[32];
	struct ckpt c;
	int k;

	snprintf(name, sizeof(name), "mut%d", _i);
	tmp_dir(name, dir, sizeof(dir));
	write_tiny_config(dir);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_tiny(&c, "model.", NULL);
	ck_layout(&c);
	k = ck_find(&c, "model.decoder.layers.0.fc1.weight");

	switch (_i) {
	case M_SHORT:
		write_file(path, "\x10\0\0", 3);
		break;
	case M_HLEN_BEYOND:
	case M_HLEN_HUGE:
	case M_HLEN_ONE: {
		struct stat st;

		ck_write(path, &c);
		ck_assert_int_eq(stat(path, &st), 0);
		ck_write_range(path, &c, 0, c.n, NULL,
			       _i == M_HLEN_BEYOND ? (uint64_t)st.st_size - 7
			       : _i == M_HLEN_HUGE ? UINT64_C(1) << 63
						   : 1);
		break;
	}
	case M_NOT_JSON:
		ck_write_range(path, &c, 0, c.n, "{\"a\": {\"dtype\": F16}}", 0);
		break;
	case M_ARRAY:
		ck_write_range(path, &c, 0, c.n, "[{\"dtype\": \"F16\"}]", 0);
		break;
	case M_NUL_HEADER:
		ck_write_range(path, &c, 0, c.n, "{\"a\\u0000b\": 1}", 0);
		break;
	case M_TRUNCATED: {
		struct stat st;

		ck_write(path, &c);
		ck_assert_int_eq(stat(path, &st), 0);
		ck_assert_int_eq(truncate(path, st.st_size - 100), 0);
		break;
	}
	case M_OFFSET_PAST_END:
		/* Raw entries do not grow the data area the writer lays out. */
		snprintf(c.e[k].raw, sizeof(c.e[k].raw),
			 "{\"dtype\":\"F16\",\"shape\":[16,8],\"data_offsets\":[%lld,%lld]}",
			 (long long)c.e[c.n - 1].end - 8, (long long)c.e[c.n - 1].end + 248);
		break;
	case M_OVERLAP:
		c.e[k].begin -= 2;
		c.e[k].end -= 2;
		break;
	case M_SPAN:
		c.e[k].end -= 2;
		break;
	case M_REVERSED:
		c.e[k].end = c.e[k].begin - 2;
		break;
	case M_NEG_DIM:
		c.e[k].shape[0] = -16;
		break;
	case M_OVERFLOW:
		snprintf(c.e[c.n].raw, sizeof(c.e[c.n].raw),
			 "{\"dtype\":\"F16\",\"shape\":[4611686018427387904,4611686018427387904],"
			 "\"data_offsets\":[0,0]}");
		snprintf(c.e[c.n].name, sizeof(c.e[c.n].name), "huge");
		c.e[c.n].bytes = NULL;
		c.n++;
		break;
	case M_UNKNOWN_DTYPE:
		snprintf(c.e[k].dtype, sizeof(c.e[k].dtype), "F17");
		break;
	case M_UNSUPPORTED_DTYPE:
		snprintf(c.e[k].dtype, sizeof(c.e[k].dtype), "I16");
		break;
	case M_F64: {
		int b = ck_find(&c, "model.decoder.final_layer_norm.bias");

		snprintf(c.e[b].dtype, sizeof(c.e[b].dtype), "F64");
		ck_layout(&c);
		break;
	}
	case M_WRONG_SHAPE:
		c.e[k].shape[0] = TH;
		c.e[k].shape[1] = TF;
		break;
	case M_POSITIONS:
		c.e[ck_find(&c, "model.decoder.embed_positions.weight")].shape[0] = TP;
		ck_layout(&c);
		break;
	case M_WRONG_RANK: {
		int b = ck_find(&c, "model.decoder.layers.1.fc1.bias");

		c.e[b].rank = 2;
		c.e[b].shape[0] = 1;
		c.e[b].shape[1] = TF;
		break;
	}
	case M_MISSING: {
		int b = ck_find(&c, "model.decoder.layers.1.fc2.bias");

		snprintf(c.e[b].name, sizeof(c.e[b].name), "model.decoder.layers.1.fc2.bias_");
		break;
	}
	case M_DUPLICATE: {
		int b = ck_find(&c, "model.decoder.layers.0.fc1.bias");

		ck_add(&c, "decoder.layers.0.fc1.bias", "F16", 1, TF, 0, c.e[b].bytes,
		       c.e[b].nbytes);
		ck_layout(&c);
		break;
	}
	case M_OFFSETS_TYPE:
		snprintf(c.e[k].raw, sizeof(c.e[k].raw),
			 "{\"dtype\":\"F16\",\"shape\":[16,8],\"data_offsets\":[0]}");
		break;
	case M_ENTRY_TYPE:
		snprintf(c.e[k].raw, sizeof(c.e[k].raw), "[\"F16\", [16, 8]]");
		break;
	case M_HIGH_RANK:
		snprintf(c.e[k].raw, sizeof(c.e[k].raw),
			 "{\"dtype\":\"F16\",\"shape\":[1,1,1,1,1,1,1,16,8],"
			 "\"data_offsets\":[%lld,%lld]}",
			 (long long)c.e[k].begin, (long long)c.e[k].end);
		break;
	case M_METADATA: {
		char *h = ck_header(&c, 0, c.n);
		char *m = strstr(h, "{\"format\":\"pt\"}");

		/* The metadata object becomes a string of the same length. */
		ck_assert_ptr_nonnull(m);
		memcpy(m, "\"pt\"           ", 15);
		ck_write_range(path, &c, 0, c.n, h, 0);
		free(h);
		break;
	}
	default:
		break;
	}
	if (access(path, F_OK) != 0)
		ck_write(path, &c);
	ck_free(&c);

	fg_clear_error();
	{
		struct fg_model_config cfg;
		struct fg_weights *w = (void *)1;
		int rc = fg_weights_open(dir, &cfg, &w);
		const char *e = fg_last_error();

		ck_assert_msg(rc == m->rc, "%s: rc %d (want %d): %s", m->what, rc, m->rc, e);
		ck_assert_ptr_null(w);
		for (int n = 0; n < 3 && m->needle[n]; n++)
			ck_assert_msg(strstr(e, m->needle[n]), "%s: error \"%s\" lacks \"%s\"",
				      m->what, e, m->needle[n]);
		ck_assert_msg(strstr(e, path), "%s: error \"%s\" does not name %s", m->what, e,
			      path);
		ck_assert_msg(!strchr(e, '\n'), "%s: error is not one line", m->what);
	}
}
END_TEST

/* A file truncated or replaced after open: -EIO, never SIGBUS. */
START_TEST(test_truncated_while_open)
{
	const char *(*kinds[])(int64_t) = { NULL, dtype_f32 };
	struct fg_model_config cfg;
	struct fg_weights *w;
	struct ckpt c;
	char dir[400], path[500], name[32];
	uint16_t buf[TV * TH];

	for (int k = 0; k < 2; k++) {
		snprintf(name, sizeof(name), "shrink%d", k);
		tmp_dir(name, dir, sizeof(dir));
		write_tiny_config(dir);
		/* embed_tokens last in the file, so cutting the end only hits it. */
		ck_tiny(&c, "model.", kinds[k]);
		{
			struct ent first = c.e[0];

			memmove(&c.e[0], &c.e[1], sizeof(c.e[0]) * (size_t)(c.n - 1));
			c.e[c.n - 1] = first;
		}
		ck_layout(&c);
		snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		ck_write(path, &c);
		ck_free(&c);
		ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
		{
			struct stat st;

			ck_assert_int_eq(stat(path, &st), 0);
			ck_assert_int_eq(truncate(path, st.st_size - 100), 0);
		}
		ck_assert_int_eq(fg_weights_read_f16(w, "decoder.embed_tokens.weight", buf, TV, TH),
				 -EIO);
		ck_assert_ptr_nonnull(strstr(fg_last_error(), "truncated or replaced"));
		ck_assert_ptr_nonnull(strstr(fg_last_error(), "decoder.embed_tokens.weight"));
		/* Rows before the cut still read. */
		ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 0, 2,
							  TH, buf),
				 0);
		ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.1.fc2.weight", buf, TH, TF),
				 0);
		ck_assert_int_eq(truncate(path, 0), 0);
		ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.1.fc2.weight", buf, TH, TF),
				 -EIO);
		fg_weights_close(w);
	}
}
END_TEST

START_TEST(test_folder_errors)
{
	char dir[400], path[500];

	snprintf(path, sizeof(path), "%s/does-not-exist", tmp_root);
	expect_open_error(path, -ENOENT, "not a model folder", "dummy:<preset>", NULL);

	tmp_dir("noconfig", dir, sizeof(dir));
	write_text(dir, "model.safetensors", "x");
	expect_open_error(dir, -ENOENT, "config.json is missing", NULL);

	tmp_dir("noweights", dir, sizeof(dir));
	write_tiny_config(dir);
	write_text(dir, "pytorch_model.bin", "x");
	expect_open_error(dir, -ENOENT, "no model.safetensors", "converted to safetensors", NULL);

	tmp_dir("badconfig", dir, sizeof(dir));
	write_text(dir, "config.json", "{\"model_type\": \"opt\", \"do_layer_norm_before\": 3}");
	expect_open_error(dir, -EINVAL, "config.json", NULL);

	expect_open_error("", -EINVAL, "dummy:<preset>", NULL);
}
END_TEST

/* ---- FlexGen .npy folders ------------------------------------------------------ */

/* Write a .npy file: version 1 or 2, header dict `dict`, then `nbytes` of data. */
static void write_npy(const char *path, int version, const char *dict, const void *data,
		      size_t nbytes)
{
	size_t pre = version == 1 ? 10 : 12, n = strlen(dict);
	size_t total = (pre + n + 1 + 63) / 64 * 64, hlen = total - pre;
	unsigned char *buf = calloc(1, total + nbytes + 1);

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (unsigned char)version;
	buf[7] = 0;
	for (size_t k = 0; k < (version == 1 ? 2u : 4u); k++)
		buf[8 + k] = (unsigned char)(hlen >> (8 * k));
	memcpy(buf + pre, dict, n);
	memset(buf + pre + n, ' ', hlen - n - 1);
	buf[total - 1] = '\n';
	if (nbytes)
		memcpy(buf + total, data, nbytes);
	write_file(path, buf, total + nbytes);
	free(buf);
}

/* The tiny model as FlexGen's converter writes it, with some variation. */
static void write_tiny_npy(const char *dir, const char *broken_name, const char *broken_dict,
			   int64_t data_delta)
{
	struct fg_model_config cfg;
	int64_t i, r, cols;
	int rank;

	tiny_config(&cfg);
	for (i = 0; i < fg_arch_tensor_count(&cfg); i++) {
		char name[128], file[200], path[600], dict[200];
		int f32 = i % 5 == 1;
		size_t nb;
		unsigned char *data;

		fg_arch_tensor_info(&cfg, i, name, sizeof(name), &rank, &r, &cols);
		nb = (size_t)(r * cols) * (f32 ? 4 : 2);
		data = malloc(nb + 8);
		ck_assert_ptr_nonnull(data);
		encode_tiny(i, r * cols, f32 ? "F32" : "F16", data);
		/* FlexGen renames the final layer norm; some files carry .npy. */
		if (!strncmp(name, "decoder.final_layer_norm.", 25))
			snprintf(file, sizeof(file), "decoder.layer_norm.%s", name + 25);
		else if (i % 7 == 3)
			snprintf(file, sizeof(file), "%s.npy", name);
		else
			snprintf(file, sizeof(file), "%s", name);
		if (rank == 2)
			snprintf(dict, sizeof(dict),
				 "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
				 f32 ? "<f4" : "<f2", (long long)r, (long long)cols);
		else
			snprintf(dict, sizeof(dict),
				 "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
				 f32 ? "<f4" : "<f2", (long long)cols);
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		if (broken_name && !strcmp(name, broken_name)) {
			if (broken_dict)
				write_npy(path, 1, broken_dict, data, nb);
			else
				write_npy(path, 1, dict, data, (size_t)((int64_t)nb + data_delta));
		} else {
			write_npy(path, i % 2 ? 2 : 1, dict, data, nb);
		}
		free(data);
	}
}

START_TEST(test_npy_folder)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	char dir[400];

	tmp_dir("opt-tiny-np", dir, sizeof(dir));
	write_tiny_config(dir);
	write_tiny_npy(dir, NULL, NULL, 0);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_int_eq(cfg.hidden, TH);
	check_tiny_values(w);
	fg_weights_close(w);
}
END_TEST

/* No config.json: the folder name gives the preset (sparse files keep it cheap). */
START_TEST(test_npy_preset_folder)
{
	struct fg_model_config cfg, want;
	struct fg_weights *w;
	char dir[400];
	uint16_t row[768];
	int64_t i, r, cols;
	int rank;

	tmp_dir("opt-125m-np", dir, sizeof(dir));
	ck_assert_int_eq(fg_model_preset("opt-125m", &want), 0);
	for (i = 0; i < fg_arch_tensor_count(&want); i++) {
		char name[128], path[600], dict[200];
		int fd;

		fg_arch_tensor_info(&want, i, name, sizeof(name), &rank, &r, &cols);
		if (rank == 2)
			snprintf(dict, sizeof(dict),
				 "{'descr': '<f2', 'fortran_order': False, 'shape': (%lld, %lld), }",
				 (long long)r, (long long)cols);
		else
			snprintf(dict, sizeof(dict),
				 "{'descr': '<f2', 'fortran_order': False, 'shape': (%lld,), }",
				 (long long)cols);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		write_npy(path, 1, dict, NULL, 0);
		fd = open(path, O_WRONLY);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(ftruncate(fd, 128 + r * cols * 2), 0);
		close(fd);
	}
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	ck_assert_str_eq(cfg.name, "opt-125m");
	ck_assert_int_eq(cfg.hidden, 768);
	ck_assert_int_eq(cfg.layers, 12);
	memset(row, 0xff, sizeof(row));
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 50000, 1, 768,
						  row),
			 0);
	for (i = 0; i < 768; i++)
		ck_assert_uint_eq(row[i], 0);
	fg_weights_close(w);

	/* Trailing slash; and a folder name that is no preset. */
	{
		char slash[420];

		snprintf(slash, sizeof(slash), "%s/", dir);
		ck_assert_msg(fg_weights_open(slash, &cfg, &w) == 0, "%s", fg_last_error());
		fg_weights_close(w);
	}
	tmp_dir("mystery-np", dir, sizeof(dir));
	write_text(dir, "decoder.embed_tokens.weight", "x");
	expect_open_error(dir, -ENOENT, "\"mystery\" is not an OPT preset", "config.json", NULL);
}
END_TEST

static const struct {
	const char *what, *dict;
	int64_t delta;
	const char *needle;
} npy_bad[] = {
	{ "fortran order", "{'descr': '<f2', 'fortran_order': True, 'shape': (16, 8), }", 0,
	  "Fortran-ordered" },
	{ "big-endian", "{'descr': '>f2', 'fortran_order': False, 'shape': (16, 8), }", 0,
	  "big-endian dtype '>f2'" },
	{ "float64", "{'descr': '<f8', 'fortran_order': False, 'shape': (16, 8), }", 0,
	  "dtype '<f8' is not supported" },
	{ "no byte order", "{'descr': '|f2', 'fortran_order': False, 'shape': (16, 8), }", 0,
	  "dtype '|f2' is not supported" },
	{ "unknown key", "{'descr': '<f2', 'fortran_order': False, 'shape': (16, 8), 'x': 1}", 0,
	  "unexpected or repeated key 'x'" },
	{ "repeated key", "{'descr': '<f2', 'descr': '<f2', 'shape': (16, 8), }", 0,
	  "unexpected or repeated key 'descr'" },
	{ "missing shape", "{'descr': '<f2', 'fortran_order': False}", 0, "lacks 'shape'" },
	{ "shape not a tuple", "{'descr': '<f2', 'fortran_order': False, 'shape': [16, 8]}", 0,
	  "'shape' must be a tuple" },
	{ "1-tuple without comma", "{'descr': '<f2', 'fortran_order': False, 'shape': (128)}", 0,
	  "expected (n,)" },
	{ "negative dim", "{'descr': '<f2', 'fortran_order': False, 'shape': (-16, 8)}", 0,
	  "non-negative integers" },
	{ "huge dim",
	  "{'descr': '<f2', 'fortran_order': False, 'shape': (99999999999999999999, 8)}", 0,
	  "too large" },
	{ "text after dict", "{'descr': '<f2', 'fortran_order': False, 'shape': (16, 8)} x", 0,
	  "unexpected text after the header dict" },
	{ "not a dict", "['<f2']", 0, "header is not a dict" },
	{ "wrong shape", "{'descr': '<f2', 'fortran_order': False, 'shape': (8, 16), }", 0,
	  "has shape [8, 16]" },
	{ "truncated data", NULL, -1, "truncated" },
	{ "extra data", NULL, 2, "corrupt" },
};

START_TEST(test_npy_malformed)
{
	char dir[400], name[32], path[600];

	snprintf(name, sizeof(name), "npybad%d", _i);
	tmp_dir(name, dir, sizeof(dir));
	write_tiny_config(dir);
	write_tiny_npy(dir, "decoder.layers.0.fc1.weight", npy_bad[_i].dict, npy_bad[_i].delta);
	snprintf(path, sizeof(path), "%s/decoder.layers.0.fc1.weight", dir);
	expect_open_error(dir, -EINVAL, npy_bad[_i].needle, path, NULL);
}
END_TEST

START_TEST(test_npy_files)
{
	char dir[400], path[600];
	struct fg_npy_info info;
	unsigned char raw[64];
	char why[160];

	tmp_dir("npyfiles", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/x", dir);

	/* Bad magic, bad version, header length past the end, missing tensor file. */
	write_file(path, "\x93NUMPZ\x01\x00\x10\x00{}", 12);
	ck_assert_int_eq(fg_npy_open(path, &info), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "not a NumPy .npy file"));
	write_file(path, "\x93NUMPY\x04\x00\x10\x00{}", 12);
	ck_assert_int_eq(fg_npy_open(path, &info), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "version 4.0"));
	write_file(path, "\x93NUMPY\x01\x00\xff\x7f{}", 12);
	ck_assert_int_eq(fg_npy_open(path, &info), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "beyond the end of the file"));
	write_file(path, "\x93NUMPY\x02\x00\xff\xff\xff\xff", 12);
	ck_assert_int_eq(fg_npy_open(path, &info), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "above the"));
	write_file(path, "\x93NUMPY\x02", 7);
	ck_assert_int_eq(fg_npy_open(path, &info), -EINVAL);
	write_file(path, "\x93NUMPY\x01\x00\x04\x00{\0}\n", 14);
	ck_assert_int_eq(fg_npy_open(path, &info), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "NUL"));

	/* A valid version 3 file, a 0-d array, spacing variants. */
	memset(raw, 0, sizeof(raw));
	write_npy(path, 3, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", raw, 24);
	ck_assert_int_eq(fg_npy_open(path, &info), 0);
	ck_assert_int_eq(info.dtype, FG_NPY_F32);
	ck_assert_int_eq(info.rank, 2);
	ck_assert_int_eq(info.shape[1], 3);
	ck_assert_uint_eq(info.data_offset % 64, 0);
	ck_assert_uint_eq(info.nbytes, 24);
	{
		const char *d0 = "{'descr':'<f2','fortran_order':False,'shape':()}";
		const char *d1 = "{ \"descr\" : \"<f2\" , \"fortran_order\" : False ,"
				 " \"shape\" : ( 4 , ) , }\n";
		const char *d2 = "{'descr': '<f2', 'fortran_order': False, 'shape': (0, 5),}";

		ck_assert_int_eq(fg_npy_parse_dict(d0, strlen(d0), &info, why, sizeof(why)), 0);
		ck_assert_int_eq(info.rank, 0);
		ck_assert_uint_eq(info.elems, 1);
		ck_assert_int_eq(fg_npy_parse_dict(d1, strlen(d1), &info, why, sizeof(why)), 0);
		ck_assert_int_eq(info.rank, 1);
		ck_assert_int_eq(info.shape[0], 4);
		ck_assert_int_eq(fg_npy_parse_dict(d2, strlen(d2), &info, why, sizeof(why)), 0);
		ck_assert_uint_eq(info.nbytes, 0);
	}
	/* Truncated dicts at every length never read past the text. */
	{
		const char *d = "{'descr': '<f2', 'fortran_order': False, 'shape': (16, 8), }";
		size_t n = strlen(d);

		for (size_t k = 0; k < n; k++) {
			char *cut = malloc(k ? k : 1);

			memcpy(cut, d, k);
			ck_assert_int_eq(fg_npy_parse_dict(cut, k, &info, why, sizeof(why)),
					 -EINVAL);
			free(cut);
		}
	}

	/* A missing file in a folder. */
	tmp_dir("npymissing", dir, sizeof(dir));
	write_tiny_config(dir);
	write_tiny_npy(dir, NULL, NULL, 0);
	snprintf(path, sizeof(path), "%s/decoder.layers.1.self_attn.v_proj.bias", dir);
	ck_assert_int_eq(unlink(path), 0);
	expect_open_error(dir, -ENOENT, "\"decoder.layers.1.self_attn.v_proj.bias\" is missing",
			  path, NULL);
}
END_TEST

/* An npy file replaced after open is caught at read time. */
START_TEST(test_npy_changed_while_open)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	char dir[400], path[600];
	uint16_t buf[TF * TH];

	tmp_dir("opt-change-np", dir, sizeof(dir));
	write_tiny_config(dir);
	write_tiny_npy(dir, NULL, NULL, 0);
	ck_assert_msg(fg_weights_open(dir, &cfg, &w) == 0, "%s", fg_last_error());
	snprintf(path, sizeof(path), "%s/decoder.layers.0.fc1.weight", dir);
	ck_assert_int_eq(truncate(path, 50), 0);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.fc1.weight", buf, TF, TH), -EIO);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "changed size"));
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.fc1.weight", buf, TF, TH),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "cannot open"));
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.fc2.weight", buf, TH, TF), 0);
	fg_weights_close(w);
}
END_TEST

/* ---- dummy weights ------------------------------------------------------------- */

/* FNV-1a over fp16 bits: a fingerprint of generated values. */
static uint64_t fnv(const uint16_t *v, size_t n)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < n; i++) {
		h = (h ^ (v[i] & 0xff)) * UINT64_C(0x100000001b3);
		h = (h ^ (v[i] >> 8)) * UINT64_C(0x100000001b3);
	}
	return h;
}

struct dummy_job {
	struct fg_weights *w;
	int64_t row0, nrows;
	uint16_t *dst;
	int rc;
};

static void *dummy_thread(void *arg)
{
	struct dummy_job *j = arg;

	j->rc = fg_weights_read_rows_f16(j->w, "decoder.layers.3.fc1.weight", j->row0, j->nrows,
					 768, j->dst + j->row0 * 768);
	return NULL;
}

START_TEST(test_dummy)
{
	struct fg_model_config cfg;
	struct fg_weights *w, *w2;
	const int64_t rows = 3072, cols = 768, n = rows * cols;
	uint16_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
	double sum = 0, sq = 0, maxabs = 0;
	int64_t i, r;

	ck_assert_int_eq(fg_weights_open("dummy:facebook/opt-125m", &cfg, &w), 0);
	ck_assert_str_eq(cfg.name, "opt-125m");
	ck_assert_int_eq(cfg.hidden, 768);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.3.fc1.weight", a, rows, cols), 0);

	/* Uniform on about [-0.0346, 0.0346]: std 0.02, mean 0. */
	for (i = 0; i < n; i++) {
		double v = fg_half_to_float(a[i]);

		sum += v;
		sq += v * v;
		if (fabs(v) > maxabs)
			maxabs = fabs(v);
	}
	ck_assert_double_le(fabs(sum / (double)n), 1e-4);
	ck_assert_double_ge(sqrt(sq / (double)n), 0.019);
	ck_assert_double_le(sqrt(sq / (double)n), 0.021);
	ck_assert_double_le(maxabs, 0.0347);
	ck_assert_double_ge(maxabs, 0.034);

	/* Any row split gives the same values: 1 row, 7 rows at odd places, threads. */
	memset(b, 0, (size_t)n * 2);
	for (r = 0; r < rows;) {
		int64_t k = r % 3 == 0 ? 1 : 7;

		if (k > rows - r)
			k = rows - r;
		ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.layers.3.fc1.weight", r, k,
							  cols, b + r * cols),
				 0);
		r += k;
	}
	ck_assert(memcmp(a, b, (size_t)n * 2) == 0);
	{
		struct dummy_job jobs[4];
		pthread_t th[4];

		memset(b, 0, (size_t)n * 2);
		for (int t = 0; t < 4; t++) {
			jobs[t] = (struct dummy_job){ .w = w, .row0 = t * 768, .nrows = 768, .dst = b };
			ck_assert_int_eq(pthread_create(&th[t], NULL, dummy_thread, &jobs[t]), 0);
		}
		for (int t = 0; t < 4; t++) {
			pthread_join(th[t], NULL);
			ck_assert_int_eq(jobs[t].rc, 0);
		}
		ck_assert(memcmp(a, b, (size_t)n * 2) == 0);
	}

	/* A second open generates the same bytes; other tensors differ. */
	ck_assert_int_eq(fg_weights_open("dummy:opt-125m", &cfg, &w2), 0);
	ck_assert_int_eq(fg_weights_read_f16(w2, "decoder.layers.3.fc1.weight", b, rows, cols), 0);
	ck_assert(memcmp(a, b, (size_t)n * 2) == 0);
	ck_assert_int_eq(fg_weights_read_f16(w2, "decoder.layers.4.fc1.weight", b, rows, cols), 0);
	ck_assert(memcmp(a, b, (size_t)n * 2) != 0);
	fg_weights_close(w2);

	/* Layer norms: weight 1, bias small; linear biases small. */
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.0.self_attn_layer_norm.weight", b,
					     1, 768),
			 0);
	for (i = 0; i < 768; i++)
		ck_assert_uint_eq(b[i], 0x3c00);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.final_layer_norm.weight", b, 1, 768), 0);
	ck_assert_uint_eq(b[767], 0x3c00);
	ck_assert_int_eq(fg_weights_read_f16(w, "decoder.layers.11.fc1.bias", b, 1, 3072), 0);
	maxabs = 0;
	for (i = 0; i < 3072; i++)
		if (fabs(fg_half_to_float(b[i])) > maxabs)
			maxabs = fabs(fg_half_to_float(b[i]));
	ck_assert_double_le(maxabs, 0.0101);
	ck_assert_double_ge(maxabs, 0.009);

	/* The generator's fingerprint: the same bytes on every machine and in
	 * every version.  If a change to dummy.c is intended, every dummy
	 * benchmark's numbers change with it: update this value knowingly. */
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.embed_tokens.weight", 1000, 4, 768,
						  b),
			 0);
	ck_assert_msg(fnv(b, 4 * 768) == UINT64_C(0x721a9d5579c30c6a), "dummy fingerprint %016llx",
		      (unsigned long long)fnv(b, 4 * 768));
	fg_weights_close(w);

	ck_assert_int_eq(fg_weights_open("dummy:opt-350m", &cfg, &w), -ENOTSUP);
	ck_assert_ptr_null(w);
	ck_assert_int_eq(fg_weights_open("dummy:gpt-2", &cfg, &w), -ENOENT);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "opt-1.3b"));
	free(a);
	free(b);
}
END_TEST

/* Large requests are split over threads: any thread count, one call or many
 * small ones at odd places, give the bytes of the one-thread generator, which
 * are those of the generator before it had threads (fingerprints taken with
 * it).  Nothing is written past the range. */
START_TEST(test_dummy_threads)
{
	static const struct {
		const char *name;
		enum fg_init init;
		uint64_t fnv;
	} t[] = {
		{ "decoder.layers.3.fc1.weight", FG_INIT_MATRIX, UINT64_C(0x1602d487fdd30fb4) },
		{ "decoder.layers.0.fc2.bias", FG_INIT_BIAS, UINT64_C(0xdece45e8e11f9f7f) },
		{ "decoder.layers.1.final_layer_norm.weight", FG_INIT_ONES, UINT64_C(0xe12d6ad65c1e0379) },
	};
	static const int threads[] = { 0, 2, 3, 7, 64, 1000 };
	static const uint64_t steps[] = { 1, 3, 7, 4093, 65537, 333333, 5 };
	enum { GUARD = 64 };
	const uint64_t elem0 = 12345, n = 3 * (UINT64_C(1) << 20) + 77;
	uint16_t *ref = malloc((size_t)n * 2), *got = malloc((size_t)(n + GUARD) * 2);

	ck_assert(ref && got);
	for (size_t k = 0; k < sizeof(t) / sizeof(t[0]); k++) {
		uint64_t pos = 0;

		fg_dummy_fill_threads(t[k].name, t[k].init, elem0, n, ref, 1);
		ck_assert_msg(fnv(ref, (size_t)n) == t[k].fnv, "%s: fingerprint %016llx",
			      t[k].name, (unsigned long long)fnv(ref, (size_t)n));
		for (size_t j = 0; j < sizeof(threads) / sizeof(threads[0]); j++) {
			memset(got, 0xa5, (size_t)(n + GUARD) * 2);
			fg_dummy_fill_threads(t[k].name, t[k].init, elem0, n, got, threads[j]);
			ck_assert_msg(memcmp(ref, got, (size_t)n * 2) == 0, "%s: %d threads differ",
				      t[k].name, threads[j]);
			for (int g = 0; g < GUARD; g++)
				ck_assert_uint_eq(got[n + (uint64_t)g], 0xa5a5);
		}
		memset(got, 0xa5, (size_t)n * 2);
		fg_dummy_fill(t[k].name, t[k].init, elem0, n, got);
		ck_assert(memcmp(ref, got, (size_t)n * 2) == 0);
		memset(got, 0xa5, (size_t)n * 2);
		for (size_t j = 0; pos < n; j++) {
			uint64_t len = steps[j % (sizeof(steps) / sizeof(steps[0]))];

			len = len < n - pos ? len : n - pos;
			fg_dummy_fill(t[k].name, t[k].init, elem0 + pos, len, got + pos);
			pos += len;
		}
		ck_assert_msg(memcmp(ref, got, (size_t)n * 2) == 0, "%s: small calls differ",
			      t[k].name);
	}
	free(got);
	free(ref);
}
END_TEST

/* The weights reader's dummy path: a large row range (threaded) reads the
 * values the one-thread generator gives at those elements. */
START_TEST(test_dummy_threads_rows)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	const int64_t row0 = 1001, rows = 257, cols = 12288, n = rows * cols;
	uint16_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);

	ck_assert(a && b);
	ck_assert_int_eq(fg_weights_open("dummy:opt-175b", &cfg, &w), 0);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "model.decoder.layers.95.fc1.weight", row0,
						  rows, cols, a),
			 0);
	fg_dummy_fill_threads("decoder.layers.95.fc1.weight", FG_INIT_MATRIX, (uint64_t)(row0 * cols),
			      (uint64_t)n, b, 1);
	ck_assert(memcmp(a, b, (size_t)n * 2) == 0);
	fg_weights_close(w);
	free(a);
	free(b);
}
END_TEST

/* Large presets open without allocating their weights. */
START_TEST(test_dummy_large)
{
	struct fg_model_config cfg;
	struct fg_weights *w;
	uint16_t row[12288];

	ck_assert_int_eq(fg_weights_open("dummy:opt-175b", &cfg, &w), 0);
	ck_assert_int_eq(cfg.layers, 96);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.layers.95.fc2.weight", 12288, 1,
						  49152, NULL),
			 -EINVAL);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.layers.95.fc1.weight", 49151, 1,
						  12288, row),
			 0);
	ck_assert_int_eq(fg_weights_read_rows_f16(w, "decoder.layers.96.fc1.weight", 0, 1, 12288,
						  row),
			 -ENOENT);
	fg_weights_close(w);
}
END_TEST

START_TEST(test_names)
{
	struct fg_model_config c;
	char name[128];
	int64_t r, cols;
	int rank;

	tiny_config(&c);
	ck_assert_int_eq(fg_arch_tensor_count(&c), 4 + 16 * TL);
	for (int64_t i = 0; i < fg_arch_tensor_count(&c); i++) {
		char model[140];

		ck_assert_int_eq(fg_arch_tensor_info(&c, i, name, sizeof(name), &rank, &r, &cols),
				 0);
		ck_assert_int_eq(fg_arch_tensor_index(&c, name), i);
		snprintf(model, sizeof(model), "model.%s", name);
		ck_assert_int_eq(fg_arch_tensor_index(&c, model), i);
	}
	ck_assert_int_eq(fg_arch_tensor_index(&c, "decoder.layer_norm.bias"), 3);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "lm_head.weight"), -1);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "decoder.layers.2.fc1.weight"), -1);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "decoder.layers.00.fc1.weight"), -1);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "decoder.layers.1"), -1);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "decoder.layers..fc1.weight"), -1);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "decoder.layers.99999999999999999999.fc1.weight"),
			 -1);
	ck_assert_int_eq(fg_arch_tensor_index(&c, "model.model.decoder.embed_tokens.weight"), -1);
	ck_assert_int_eq(fg_arch_tensor_info(&c, 1, name, sizeof(name), &rank, &r, &cols), 0);
	ck_assert_str_eq(name, "decoder.embed_positions.weight");
	ck_assert_int_eq(r, TP + 2);
	ck_assert_int_eq(fg_arch_tensor_info(&c, 4 + 16 + 10, name, sizeof(name), &rank, &r,
						&cols),
			 0);
	ck_assert_str_eq(name, "decoder.layers.1.fc1.weight");
	ck_assert_int_eq(r, TF);
	ck_assert_int_eq(cols, TH);
	ck_assert_int_eq(fg_arch_tensor_info(&c, 0, name, 8, &rank, &r, &cols), -EINVAL);
}
END_TEST

static Suite *weights_suite(void)
{
	Suite *s = suite_create("weights");
	const char *td = getenv("FGCORE_TESTDATA");
	TCase *tc;

	tc = tcase_create("names");
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("safetensors");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_single_file);
	tcase_add_test(tc, test_convert);
	tcase_add_test(tc, test_nonfinite);
	tcase_add_test(tc, test_convert_large);
	tcase_add_test(tc, test_sharded);
	tcase_add_test(tc, test_sharded_bad);
	tcase_add_loop_test(tc, test_malformed_safetensors, 0, M_COUNT);
	tcase_add_test(tc, test_truncated_while_open);
	tcase_add_test(tc, test_folder_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("npy");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_npy_folder);
	tcase_add_test(tc, test_npy_preset_folder);
	tcase_add_loop_test(tc, test_npy_malformed, 0, (int)(sizeof(npy_bad) / sizeof(npy_bad[0])));
	tcase_add_test(tc, test_npy_files);
	tcase_add_test(tc, test_npy_changed_while_open);
	suite_add_tcase(s, tc);

	tc = tcase_create("dummy");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_dummy);
	tcase_add_test(tc, test_dummy_large);
	tcase_add_test(tc, test_dummy_threads);
	tcase_add_test(tc, test_dummy_threads_rows);
	suite_add_tcase(s, tc);

	if (td && *td) {
		tc = tcase_create("reference");
		tcase_add_test(tc, test_reference_checkpoint);
		suite_add_tcase(s, tc);
	} else {
		printf("FGCORE_TESTDATA is unset: skipping the reference checkpoint case\n");
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(weights_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
