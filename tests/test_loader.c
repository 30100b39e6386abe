/* tests/test_loader.c - the plugin loader: every refusal with its own message
 * naming the file, the skeleton plugins loading and working, the search path,
 * option parsing, and the core's host (error line, log). */
#include <check.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fgcore/codec.h>
#include <fgcore/compute.h>
#include <fgcore/fgcore.h>
#include <fgcore/storage.h>
#include <fgcore/transport.h>
#include "core/backend/backend.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

static char skel_dir[PATH_MAX];
static char bad_dir[PATH_MAX];

static void find_dirs(void)
{
	const char *b = getenv("FGCORE_BUILDDIR");

	if (b == NULL || *b == '\0')
		b = ".";
	snprintf(skel_dir, sizeof(skel_dir), "%s/plugins/skeleton/.libs", b);
	snprintf(bad_dir, sizeof(bad_dir), "%s/tests/plugins/.libs", b);
}

static void use_path(const char *path)
{
	ck_assert_int_eq(setenv("FGCORE_PLUGIN_PATH", path, 1), 0);
}

static char *make_tmpdir(void)
{
	char *d = strdup("/tmp/fgcore-test-loader.XXXXXX");

	ck_assert_ptr_nonnull(d);
	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

static void rm_rf(const char *dir)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* ---- refusals ------------------------------------------------------------------ */

struct refusal {
	const char *file;     /* in bad_dir, or NULL: see path */
	int err;              /* expected return */
	char expect[256];     /* a fragment of the message */
};

START_TEST(test_refusals)
{
	struct refusal cases[] = {
		{ "bad_abi_major.so", -ENOTSUP, "" },
		{ "newer_minor.so", -ENOTSUP, "" },
		{ "storage_newer_minor.so", -ENOTSUP, "" },
		{ "wrong_kind.so", -ENOTSUP, "unknown plugin kind 42: a plugin is of kind 1 (storage)" },
		{ "no_entry.so", -ENOEXEC, "no fg_plugin_entry symbol, so not an fgcore plugin" },
		{ "missing_hook.so", -EINVAL,
		  "storage plugin lacks the required hook 'read' (struct fg_storage_ops)" },
		{ "submit_no_reap.so", -EINVAL,
		  "storage plugin has the optional hook 'submit' but not 'reap': provide both or neither" },
		{ "name_mismatch.so", -EINVAL,
		  "the plugin calls itself 'some_other_name' but its file is 'name_mismatch.so'" },
		{ "bad_option_table.so", -EINVAL,
		  "option 'width' (int, 8 bytes at offset 8) lies outside the 8-byte options struct" },
		{ "compute_no_rope.so", -EINVAL,
		  "compute plugin built for ABI 1.1 lacks the hook 'rope', required from compute "
		  "ABI 1.1 on" },
		{ "compute_no_supports.so", -EINVAL,
		  "compute plugin built for ABI 1.1 lacks the hook 'supports', required from "
		  "compute ABI 1.1 on" },
		{ "compute_half_streams.so", -EINVAL,
		  "compute plugin defines some of the stream/event hooks (stream_create, "
		  "stream_destroy, stream_sync, event_create, event_destroy, event_record, "
		  "stream_wait) but not all seven" },
		{ "compute_half_timers.so", -EINVAL,
		  "compute plugin defines some of the timer hooks (timer_create, timer_destroy, "
		  "timer_record, timer_elapsed) but not all four" },
		/* read as a struct before: UBSan saw a misaligned load */
		{ "entry_function.so", -ENOEXEC,
		  "fg_plugin_entry is a function, not a data object, so not an fgcore plugin" },
		{ "entry_small.so", -ENOEXEC, "" },
		{ "entry_misaligned.so", -ENOEXEC, "" },
		{ "not_a_plugin.so", -ENOEXEC, "not loadable as a plugin" },
		{ "does_not_exist.so", -ENOENT, "cannot open the plugin: No such file or directory" },
	};
	const size_t n = sizeof(cases) / sizeof(cases[0]);
	char msgs[sizeof(cases) / sizeof(cases[0])][1024];
	char *tmp = make_tmpdir();

	/* Another major: every kind's version, since the kind is not read. */
	snprintf(cases[0].expect, sizeof(cases[0].expect),
		 "built for ABI %d.0, this fgcore speaks ABI %d (storage %d.%d, compute %d.%d, "
		 "codec %d.%d, transport %d.%d): rebuild the plugin against this fgcore's headers",
		 FG_ABI_MAJOR + 1, FG_ABI_MAJOR, FG_ABI_MAJOR, FG_STORAGE_ABI_MINOR, FG_ABI_MAJOR,
		 FG_COMPUTE_ABI_MINOR, FG_ABI_MAJOR, FG_CODEC_ABI_MINOR, FG_ABI_MAJOR,
		 FG_TRANSPORT_ABI_MINOR);
	/* A newer minor: the kind's, against this fgcore's for that kind. */
	snprintf(cases[1].expect, sizeof(cases[1].expect),
		 "codec plugin built for codec ABI %d.%d, newer than this fgcore's codec ABI "
		 "%d.%d: upgrade fgcore or rebuild the plugin against this fgcore's headers",
		 FG_ABI_MAJOR, FG_CODEC_ABI_MINOR + 1, FG_ABI_MAJOR, FG_CODEC_ABI_MINOR);
	snprintf(cases[2].expect, sizeof(cases[2].expect),
		 "storage plugin built for storage ABI %d.%d, newer than this fgcore's storage ABI "
		 "%d.%d: upgrade fgcore", FG_ABI_MAJOR, FG_STORAGE_ABI_MINOR + 1, FG_ABI_MAJOR,
		 FG_STORAGE_ABI_MINOR);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(cases[i].file, "entry_small.so") == 0)
			snprintf(cases[i].expect, sizeof(cases[i].expect),
				 "fg_plugin_entry is a 4-byte object, smaller than a struct "
				 "fg_plugin (%zu bytes)", sizeof(struct fg_plugin));
		if (strcmp(cases[i].file, "entry_misaligned.so") == 0)
			snprintf(cases[i].expect, sizeof(cases[i].expect),
				 "fg_plugin_entry is at an address not aligned for a struct "
				 "fg_plugin (to %zu bytes)", _Alignof(struct fg_plugin));
	}
	for (size_t i = 0; i < n; i++) {
		struct fg_plugin_handle h;
		char path[PATH_MAX + 64];
		int r;

		if (strcmp(cases[i].file, "not_a_plugin.so") == 0) {
			snprintf(path, sizeof(path), "%s/%s", tmp, cases[i].file);
			write_file(path, "this is a text file, not a shared object\n");
		} else if (strcmp(cases[i].file, "does_not_exist.so") == 0) {
			snprintf(path, sizeof(path), "%s/%s", tmp, cases[i].file);
		} else {
			snprintf(path, sizeof(path), "%s/%s", bad_dir, cases[i].file);
		}
		fg_clear_error();
		r = fg_plugin_open_file(path, 0, NULL, &h);
		ck_assert_msg(r == cases[i].err, "%s: returned %d, expected %d (%s)", cases[i].file,
			      r, cases[i].err, fg_last_error());
		ck_assert_ptr_null(h.plugin);
		ck_assert_ptr_null(h.dl);
		snprintf(msgs[i], sizeof(msgs[i]), "%s", fg_last_error());
		/* The line starts with the file, and says what is wrong. */
		ck_assert_msg(strncmp(msgs[i], path, strlen(path)) == 0 &&
			      msgs[i][strlen(path)] == ':', "%s: message does not start with the "
			      "path: %s", cases[i].file, msgs[i]);
		ck_assert_msg(strstr(msgs[i], cases[i].expect) != NULL,
			      "%s: message '%s' lacks '%s'", cases[i].file, msgs[i],
			      cases[i].expect);
		ck_assert_ptr_null(strchr(msgs[i], '\n'));
	}
	/* Each reason has its own message. */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			ck_assert_str_ne(strchr(msgs[i], ':'), strchr(msgs[j], ':'));
	rm_rf(tmp);
	free(tmp);
}
END_TEST

START_TEST(test_wrong_kind_and_name)
{
	struct fg_plugin_handle h;
	char path[PATH_MAX + 64];

	use_path(skel_dir);
	ck_assert_int_eq(fg_plugin_load("codec_skeleton", FG_PLUGIN_STORAGE, &h), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "codec_skeleton.so: is a codec plugin, but a "
				     "storage plugin is needed here"));
	snprintf(path, sizeof(path), "%s/codec_skeleton.so", skel_dir);
	ck_assert_int_eq(fg_plugin_open_file(path, 0, "other_codec", &h), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "calls itself 'codec_skeleton' but was "
				     "asked for as 'other_codec'"));
	/* The same file under another name is refused: the name is the file's. */
	ck_assert_int_eq(fg_plugin_open_file(path, FG_PLUGIN_CODEC, NULL, &h), 0);
	fg_plugin_close(&h);
}
END_TEST

START_TEST(test_bad_names)
{
	static const char *const bad[] = { "../skeleton/codec_skeleton", "codec/skeleton", "Codec",
					   "codec-skeleton", "codec.so", "a b", "" };
	struct fg_plugin_handle h;

	use_path(skel_dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(fg_plugin_load(bad[i], 0, &h), -EINVAL);
		ck_assert_msg(strstr(fg_last_error(), "not valid") ||
			      strstr(fg_last_error(), "is empty"), "%s: %s", bad[i], fg_last_error());
	}
	ck_assert_int_eq(fg_plugin_load(NULL, 0, &h), -EINVAL);
	ck_assert_int_eq(fg_plugin_name_valid("pinned_host"), 1);
	ck_assert_int_eq(fg_plugin_name_valid("int4_group64"), 1);
	ck_assert_int_eq(fg_plugin_name_valid(
		"a_name_of_sixty_four_characters_is_one_too_many_for_the_loader_x"), 0);
}
END_TEST

START_TEST(test_not_found)
{
	struct fg_plugin_handle h;
	char expect[PATH_MAX + 64];

	use_path(skel_dir);
	ck_assert_int_eq(fg_plugin_load("no_such_plugin", 0, &h), -ENOENT);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "plugin 'no_such_plugin' not found: no "
				     "no_such_plugin.so in "));
	snprintf(expect, sizeof(expect), "%s:", skel_dir);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), expect));
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "FGCORE_PLUGIN_PATH"));
}
END_TEST

/* ---- the skeletons really work -------------------------------------------------------- */

START_TEST(test_skeleton_storage)
{
	const struct fg_storage_ops *ops;
	struct fg_plugin_handle h;
	struct fg_storage_info info;
	struct fg_region r;
	struct fg_io io[3], *ios[3], *done[4];
	char buf[100], back[100];
	void *opts, *ctx;

	use_path(skel_dir);
	ck_assert_int_eq(fg_plugin_load("storage_skeleton", FG_PLUGIN_STORAGE, &h), 0);
	ck_assert_str_eq(h.plugin->name, "storage_skeleton");
	ck_assert_int_gt(fg_plugin_probe(&h), 0);
	ops = h.plugin->ops;
	opts = fg_plugin_opts_new(h.plugin);
	ck_assert_ptr_nonnull(opts);
	ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, "max_bytes", "3M", "test"), 0);
	ck_assert_int_eq(ops->open(fg_core_host(), opts, &ctx, &info), 0);
	ck_assert_uint_eq(info.capacity, 3u << 20);
	ck_assert(info.flags & FG_STORAGE_ADDRESSABLE);
	ck_assert_int_eq(ops->alloc(ctx, 1000, &r), 0);
	ck_assert_ptr_nonnull(r.addr);
	ck_assert_uint_eq((uintptr_t)r.addr % 64, 0);
	for (int i = 0; i < 100; i++)
		buf[i] = (char)(i * 7);
	ck_assert_int_eq(ops->write(ctx, &r, 900, buf, 100), 0);
	ck_assert_int_eq(ops->read(ctx, &r, 900, back, 100), 0);
	ck_assert_mem_eq(buf, back, 100);
	ck_assert_int_eq(ops->write(ctx, &r, 901, buf, 100), -EINVAL);
	/* submit / reap */
	memset(io, 0, sizeof(io));
	for (int i = 0; i < 3; i++) {
		io[i].op = i == 0 ? FG_IO_WRITE : FG_IO_READ;
		io[i].region = &r;
		io[i].offset = 10;
		io[i].buf = i == 0 ? buf : back;
		io[i].len = 50;
		io[i].result = 1;
		ios[i] = &io[i];
	}
	ck_assert_int_eq(ops->submit(ctx, ios, 3), 0);
	ck_assert_int_eq(ops->reap(ctx, done, 1, 2), 2);
	ck_assert_ptr_eq(done[0], &io[0]);
	ck_assert_ptr_eq(done[1], &io[1]);
	/* more than is outstanding: what there is, without blocking */
	ck_assert_int_eq(ops->reap(ctx, done, 4, 4), 1);
	ck_assert_ptr_eq(done[0], &io[2]);
	ck_assert_int_eq(ops->reap(ctx, done, 1, 4), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(io[i].result, 0);
	ck_assert_mem_eq(back, buf, 50);
	ops->free(ctx, &r);
	ops->close(ctx);
	free(opts);
	fg_plugin_close(&h);
	ck_assert_ptr_null(h.dl);
}
END_TEST

START_TEST(test_skeleton_codec)
{
	const struct fg_codec_ops *ops;
	struct fg_plugin_handle h;
	struct fg_codec_shape s = { .rows = 3, .cols = 5, .group_dim = 1 };
	float src[15], dst[15];
	unsigned char enc[60];

	use_path(skel_dir);
	ck_assert_int_eq(fg_plugin_load("codec_skeleton", FG_PLUGIN_CODEC, &h), 0);
	ck_assert_int_eq(fg_plugin_probe(&h), 1); /* no probe: usable */
	ops = h.plugin->ops;
	ck_assert_uint_eq(ops->encoded_size(&s), 60);
	for (int i = 0; i < 15; i++)
		src[i] = (float)i * 0.25f - 1.0f;
	ck_assert_int_eq(ops->encode_f32(&s, src, enc), 0);
	ck_assert_int_eq(ops->decode_f32(&s, enc, dst), 0);
	ck_assert_mem_eq(src, dst, sizeof(src));
	s.rows = UINT64_MAX / 2;
	ck_assert_uint_eq(ops->encoded_size(&s), 0);
	fg_plugin_close(&h);
}
END_TEST

static uint16_t to_half(float f)
{
	/* exact for the small dyadic values used here */
	uint32_t b;

	memcpy(&b, &f, 4);
	if ((b & 0x7fffffff) == 0)
		return (uint16_t)(b >> 16);
	return (uint16_t)(((b >> 16) & 0x8000) | ((((b >> 23) & 0xff) - 112) << 10) |
			  ((b >> 13) & 0x3ff));
}

/* Open a compute plugin of `dir` as the engine does: loader, options, backend. */
static void compute_open(const char *dir, const char *name, struct fg_backend *b,
			 const char *key, const char *val)
{
	struct fg_plugin_handle h;
	void *opts;

	use_path(dir);
	ck_assert_msg(fg_plugin_load(name, FG_PLUGIN_COMPUTE, &h) == 0, "%s", fg_last_error());
	opts = fg_plugin_opts_new(h.plugin);
	ck_assert_ptr_nonnull(opts);
	if (key)
		ck_assert_int_eq(fg_plugin_opts_set(h.plugin, opts, key, val, "test"), 0);
	ck_assert_msg(fg_backend_open(b, &h, opts) == 0, "%s", fg_last_error());
	ck_assert_int_eq(b->info.act_dtype, FG_DTYPE_F32);
}

/* A refusal through the core's wrappers: rc and one line with every fragment. */
static void expect_refused(int got, int rc, const char *frag1, const char *frag2)
{
	const char *e = fg_last_error();

	ck_assert_msg(got == rc, "got %d, expected %d (%s)", got, rc, e);
	ck_assert_msg(strstr(e, frag1) != NULL, "'%s' lacks '%s'", e, frag1);
	ck_assert_msg(!frag2 || strstr(e, frag2) != NULL, "'%s' lacks '%s'", e, frag2);
	ck_assert_ptr_null(strchr(e, '\n'));
}

/* linear: x [2,3] . w[4,3]^T + bias, relu, + residual */
static void linear_check(struct fg_backend *b, const char *plugin)
{
	float x[6] = { 1, 2, 3, -1, 0.5f, 2 };
	float wf[12] = { 1, 0, 0, 0, 1, 0, 0, 0, 1, -1, -1, -1 };
	float bf[4] = { 0.5f, 0, 0, 0.25f };
	uint16_t w[12], bias[4];
	float res[8], out[8];
	char want[128];

	for (int i = 0; i < 12; i++)
		w[i] = to_half(wf[i]);
	for (int i = 0; i < 4; i++)
		bias[i] = to_half(bf[i]);
	for (int i = 0; i < 8; i++)
		res[i] = (float)i;
	struct fg_linear_args la = {
		.x = { x, FG_DTYPE_F32, 2, 3, 3 },
		.w = { w, FG_DTYPE_F16, 4, 3, 3 },
		.bias = { bias, FG_DTYPE_F16, 1, 4, 4 },
		.act = FG_ACT_RELU,
		.residual = { res, FG_DTYPE_F32, 2, 4, 4 },
		.out = { out, FG_DTYPE_F32, 2, 4, 4 },
	};
	ck_assert_int_eq(fg_backend_linear(b, NULL, -1, NULL, &la), 0);
	{
		const float want_out[8] = { 1.5f + 0, 2 + 1, 3 + 2, 0 + 3,
					    0 + 4, 0.5f + 5, 2 + 6, 0 + 7 };

		for (int i = 0; i < 8; i++)
			ck_assert_float_eq_tol(out[i], want_out[i], 1e-6);
	}
	/* A wrong shape is refused by the core, with the plugin, layer and op. */
	la.out.cols = 3;
	expect_refused(fg_backend_linear(b, NULL, -1, NULL, &la), -EINVAL,
		       "linear: out is [2, 3], expected [2, 4]", NULL);
	snprintf(want, sizeof(want), "%s: layer 3: fc1 (linear): out is [2, 3], expected [2, 4]",
		 plugin);
	expect_refused(fg_backend_linear(b, NULL, 3, "fc1", &la), -EINVAL, want, NULL);
}

/* prefill with seq 2, one head of 2, no padding: row 0 attends to itself
 * only (out = v0), row 1 to both. */
static void prefill_check(struct fg_backend *b)
{
	float q[4] = { 1, 0, 1, 0 }, k[4] = { 1, 0, 0, 1 }, v[4] = { 1, 2, 3, 4 };
	float o[4];
	int32_t pad[1] = { 0 };
	struct fg_attention_args aa = {
		.q = { q, FG_DTYPE_F32, 2, 2, 2 }, .k = { k, FG_DTYPE_F32, 2, 2, 2 },
		.v = { v, FG_DTYPE_F32, 2, 2, 2 }, .out = { o, FG_DTYPE_F32, 2, 2, 2 },
		.batch = 1, .seq = 2, .heads = 1, .head_dim = 2, .scale = 1, .pad = pad,
	};
	double p0 = exp(1.0) / (exp(1.0) + 1);

	ck_assert_int_eq(fg_backend_attention_prefill(b, NULL, 0, "attn", &aa), 0);
	ck_assert_float_eq_tol(o[0], 1, 1e-6);
	ck_assert_float_eq_tol(o[1], 2, 1e-6);
	ck_assert_float_eq_tol(o[2], p0 * 1 + (1 - p0) * 3, 1e-5);
	ck_assert_float_eq_tol(o[3], p0 * 2 + (1 - p0) * 4, 1e-5);
	pad[0] = 1; /* row 0 is padding: zeros; row 1 sees only key 1 */
	ck_assert_int_eq(fg_backend_attention_prefill(b, NULL, 0, "attn", &aa), 0);
	ck_assert_float_eq(o[0], 0);
	ck_assert_float_eq_tol(o[2], 3, 1e-6);
	pad[0] = 3;
	expect_refused(fg_backend_attention_prefill(b, NULL, 0, "attn", &aa), -EINVAL,
		       "layer 0: attn (attention_prefill): pad[0] = 3 is outside [0, 2]", NULL);
}

START_TEST(test_skeleton_compute)
{
	struct fg_backend b;

	compute_open(skel_dir, "compute_skeleton", &b, "check_finite", "yes");
	ck_assert_uint_eq(b.minor, FG_COMPUTE_ABI_MINOR); /* the headers' compute version */
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_ROPE, FG_DTYPE_F32), 1);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS), 0);
	linear_check(&b, "compute_skeleton");
	prefill_check(&b);
	/* rope, 1.1: one row, one head of 4, rotated by a quarter turn on pair 0 */
	{
		float x[4] = { 1, 2, 3, 4 }, inv[2] = { 1.57079632679489662f, 0 };
		int32_t pos[1] = { 1 };
		struct fg_rope_args ra = {
			.x = { x, FG_DTYPE_F32, 1, 4, 4 }, .positions = pos, .n = 1, .heads = 1,
			.head_dim = 4, .rot_dim = 4, .inv_freq = inv, .attn_factor = 1,
		};

		ck_assert_int_eq(fg_backend_rope(&b, NULL, 0, "q", &ra), 0);
		/* pair (1, 3) by 90 degrees: (-3, 1); pair (2, 4) by 0: unchanged */
		ck_assert_float_eq_tol(x[0], -3, 1e-6);
		ck_assert_float_eq_tol(x[2], 1, 1e-6);
		ck_assert_float_eq_tol(x[1], 2, 1e-6);
		ck_assert_float_eq_tol(x[3], 4, 1e-6);
	}
	fg_backend_close(&b);
}
END_TEST

/* A plugin built for ABI 1.0 loads under a 1.1 core, runs the 1.0 ops, and
 * is refused cleanly, naming the feature, when asked for one of 1.1; the core
 * answers `supports` for it from native_codecs and never calls the 1.1
 * members (traps that abort in the test plugin). */
START_TEST(test_compute_abi10)
{
	struct fg_backend b;
	float x[8] = { 1, 2, 3, 4, -1, 0, 1, 2 }, out[8], mul[8] = { 0 };
	float q[4] = { 1, 0, 0, 1 }, kc[8] = { 0 }, vc[8] = { 0 }, src[4] = { 1, 0, 5, 6 };
	float inv[1] = { 1 };
	uint16_t g[4], be[4], tok[8], pos[8], w[8];
	int32_t ids[2] = { 1, 0 }, positions[2] = { 0, 1 }, pad[1] = { 0 };

	compute_open(bad_dir, "compute_abi10", &b, NULL, NULL);
	ck_assert_uint_eq(b.minor, 0);
	/* supports, from the 1.0 op set and native_codecs = "fp16" */
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_LINEAR, FG_DTYPE_F16), 1);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_LINEAR, FG_DTYPE_Q4_ROWS), 0);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_ATTENTION_DECODE, FG_DTYPE_F32), 1);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_ATTENTION_DECODE, FG_DTYPE_Q4_COLS), 0);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_LAYER_NORM, FG_DTYPE_F32), 1);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_EMBED, FG_DTYPE_F16), 1);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_RMS_NORM, FG_DTYPE_F32), 0);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_ROPE, FG_DTYPE_F32), 0);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_LINEAR_SILU, FG_DTYPE_F16), 0);
	ck_assert_int_eq(fg_backend_supports(&b, FG_OP_ATTENTION_GQA, FG_DTYPE_F32), 0);

	/* the 1.0 ops run */
	linear_check(&b, "compute_abi10");
	prefill_check(&b);
	for (int i = 0; i < 4; i++)
		g[i] = to_half(1), be[i] = to_half(0.5f);
	for (int i = 0; i < 8; i++)
		tok[i] = to_half((float)i), pos[i] = to_half(i < 4 ? 0 : 0.5f), w[i] = to_half(1);
	struct fg_layer_norm_args ln = {
		.x = { x, FG_DTYPE_F32, 2, 4, 4 }, .gamma = { g, FG_DTYPE_F16, 1, 4, 4 },
		.beta = { be, FG_DTYPE_F16, 1, 4, 4 }, .eps = 0,
		.out = { out, FG_DTYPE_F32, 2, 4, 4 }, .kind = FG_NORM_LAYER,
	};
	ck_assert_int_eq(fg_backend_norm(&b, NULL, 2, "ln", &ln), 0);
	/* row 0: mean 2.5, var 1.25 */
	ck_assert_float_eq_tol(out[0], (1 - 2.5) / sqrt(1.25) + 0.5, 1e-6);
	struct fg_embed_args em = {
		.ids = ids, .positions = positions, .n = 2, .tok = { tok, FG_DTYPE_F16, 2, 4, 4 },
		.pos = { pos, FG_DTYPE_F16, 2, 4, 4 }, .out = { out, FG_DTYPE_F32, 2, 4, 4 },
	};
	ck_assert_int_eq(fg_backend_embed(&b, NULL, -1, "tok", &em), 0);
	ck_assert_float_eq(out[0], 4);	  /* token 1, position 0 */
	ck_assert_float_eq(out[4], 0.5f); /* token 0, position 1 */
	struct fg_kv_append_args kv = {
		.src = { src, FG_DTYPE_F32, 2, 2, 2 }, .cache = { kc, FG_DTYPE_F32, 4, 2, 2 },
		.batch = 1, .n = 2, .start = 0, .cache_stride = 4,
	};
	ck_assert_int_eq(fg_backend_kv_append(&b, NULL, 1, "k", &kv), 0);
	kv.cache.data = vc;
	ck_assert_int_eq(fg_backend_kv_append(&b, NULL, 1, "v", &kv), 0);
	struct fg_attention_args d = {
		.q = { q, FG_DTYPE_F32, 1, 2, 2 }, .k = { kc, FG_DTYPE_F32, 4, 2, 2 },
		.v = { vc, FG_DTYPE_F32, 4, 2, 2 }, .out = { out, FG_DTYPE_F32, 1, 2, 2 },
		.batch = 1, .seq = 1, .len = 2, .cache_stride = 4, .heads = 1, .head_dim = 2,
		.scale = 0, .pad = pad,
	};
	ck_assert_int_eq(fg_backend_attention_decode(&b, NULL, 1, "attn", &d), 0);
	ck_assert_float_eq_tol(out[0], 3, 1e-6); /* scale 0: the mean of v rows */

	/* the features of 1.1: refused, each named, -ENOTSUP */
	ln.kind = FG_NORM_RMS;
	ln.beta.data = NULL;
	expect_refused(fg_backend_norm(&b, NULL, 2, "ln", &ln), -ENOTSUP,
		       "compute_abi10: layer 2: ln (rms_norm): RMS norm needs a backend built for "
		       "compute ABI 1.1, this plugin is built for 1.0", NULL);
	ln.kind = FG_NORM_LAYER;
	expect_refused(fg_backend_norm(&b, NULL, 2, "ln", &ln), -ENOTSUP,
		       "layer norm without beta needs a backend built for compute ABI 1.1", NULL);
	em.pos.data = NULL;
	expect_refused(fg_backend_embed(&b, NULL, -1, "tok", &em), -ENOTSUP,
		       "compute_abi10: tok (embed): embed without a position table needs", NULL);
	struct fg_linear_args la = {
		.x = { x, FG_DTYPE_F32, 2, 4, 4 }, .w = { w, FG_DTYPE_F16, 2, 4, 4 },
		.act = FG_ACT_SILU, .out = { out, FG_DTYPE_F32, 2, 2, 2 },
	};
	expect_refused(fg_backend_linear(&b, NULL, 5, "gate", &la), -ENOTSUP,
		       "layer 5: gate (linear): SiLU needs", "ABI 1.1");
	la.act = FG_ACT_NONE;
	la.mul = (struct fg_tensor){ mul, FG_DTYPE_F32, 2, 2, 2 };
	expect_refused(fg_backend_linear(&b, NULL, 5, "up", &la), -ENOTSUP,
		       "layer 5: up (linear): a gating multiplier (mul) needs", "ABI 1.1");
	struct fg_rope_args ra = {
		.x = { x, FG_DTYPE_F32, 2, 4, 4 }, .positions = positions, .n = 2, .heads = 2,
		.head_dim = 2, .rot_dim = 2, .inv_freq = inv, .attn_factor = 1,
	};
	expect_refused(fg_backend_rope(&b, NULL, 4, "q", &ra), -ENOTSUP,
		       "layer 4: q (rope): rope needs a backend built for compute ABI 1.1", NULL);
	d.q = (struct fg_tensor){ x, FG_DTYPE_F32, 1, 4, 4 };
	d.out = (struct fg_tensor){ out, FG_DTYPE_F32, 1, 4, 4 };
	d.heads = 2, d.kv_heads = 1;
	expect_refused(fg_backend_attention_decode(&b, NULL, 1, "attn", &d), -ENOTSUP,
		       "layer 1: attn (attention_decode): grouped-query attention", "ABI 1.1");
	/* kv_heads == heads is plain multi-head attention: fine for 1.0 */
	d.q.cols = d.q.ld = d.out.cols = d.out.ld = 2, d.heads = 1, d.kv_heads = 1;
	ck_assert_int_eq(fg_backend_attention_decode(&b, NULL, 1, "attn", &d), 0);
	fg_backend_close(&b);
}
END_TEST

/* ---- search path and enumeration ------------------------------------------------------ */

struct seen {
	char paths[16][PATH_MAX];
	int n, stop_after;
};

static int collect(const char *path, void *user)
{
	struct seen *s = user;

	if (s->n < 16)
		snprintf(s->paths[s->n], PATH_MAX, "%s", path);
	s->n++;
	return s->stop_after && s->n == s->stop_after ? 7 : 0;
}

/* ---- a minor per kind ------------------------------------------------------------------ */

/* Open a file of bad_dir as any kind: 0 or the loader's -errno. */
static int open_bad(const char *file, struct fg_plugin_handle *h)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", bad_dir, file);
	fg_clear_error();
	return fg_plugin_open_file(path, 0, NULL, h);
}

/* Each kind is checked against its own minor: storage's next minor is
 * refused (test_refusals) while the same number on compute loads once
 * compute's minor is that far ahead; the pre-split FG_ABI_VERSION loads as
 * any kind; the versions this fgcore reports are the headers'. */
START_TEST(test_abi_per_kind)
{
	const uint32_t s = FG_STORAGE_ABI_MINOR, major = FG_ABI_MAJOR;
	struct fg_plugin_handle h;
	char want[256], text[128];
	int r;

	/* the host's versions: each kind's header, the shared one below all */
	ck_assert_uint_eq(fg_plugin_kind_abi(FG_PLUGIN_STORAGE), FG_STORAGE_ABI_VERSION);
	ck_assert_uint_eq(fg_plugin_kind_abi(FG_PLUGIN_COMPUTE), FG_COMPUTE_ABI_VERSION);
	ck_assert_uint_eq(fg_plugin_kind_abi(FG_PLUGIN_CODEC), FG_CODEC_ABI_VERSION);
	ck_assert_uint_eq(fg_plugin_kind_abi(FG_PLUGIN_TRANSPORT), FG_TRANSPORT_ABI_VERSION);
	ck_assert_uint_eq(fg_plugin_kind_abi(42), 0);
	for (uint32_t k = FG_PLUGIN_STORAGE; k <= FG_PLUGIN_TRANSPORT; k++) {
		ck_assert_uint_eq(FG_ABI_MAJOR_OF(fg_plugin_kind_abi(k)), FG_ABI_MAJOR);
		ck_assert_uint_ge(FG_ABI_MINOR_OF(fg_plugin_kind_abi(k)), FG_ABI_MINOR);
		ck_assert_uint_ge(FG_ABI_MINOR_OF(fg_plugin_kind_abi(k)), 10); /* the split */
	}
	snprintf(want, sizeof(want), "storage %d.%d, compute %d.%d, codec %d.%d, transport %d.%d",
		 FG_ABI_MAJOR, FG_STORAGE_ABI_MINOR, FG_ABI_MAJOR, FG_COMPUTE_ABI_MINOR,
		 FG_ABI_MAJOR, FG_CODEC_ABI_MINOR, FG_ABI_MAJOR, FG_TRANSPORT_ABI_MINOR);
	ck_assert_str_eq(fg_plugin_abi_text(text, sizeof(text)), want);
	ck_assert_uint_eq(strlen(fg_plugin_abi_text(text, 12)), 11); /* cut, not overflowed */

	/* A compute plugin at storage's minor + 1: the headers decide. */
	r = open_bad("compute_storage_minor.so", &h);
	if (FG_COMPUTE_ABI_MINOR > FG_STORAGE_ABI_MINOR) {
		ck_assert_msg(r == 0, "refused: %s", fg_last_error());
		ck_assert_uint_eq(h.plugin->kind, FG_PLUGIN_COMPUTE);
		ck_assert_uint_eq(FG_ABI_MINOR_OF(h.plugin->abi_version), s + 1);
		fg_plugin_close(&h);
	} else {
		ck_assert_int_eq(r, -ENOTSUP);
		snprintf(want, sizeof(want), "compute plugin built for compute ABI %u.%u, newer "
			 "than this fgcore's compute ABI %u.%u", major, s + 1, major,
			 (unsigned)FG_COMPUTE_ABI_MINOR);
		ck_assert_msg(strstr(fg_last_error(), want), "'%s' lacks '%s'", fg_last_error(),
			      want);
	}

	/* The same against a host whose compute is one minor ahead of its
	 * storage, as after the next compute addition: the check the loader
	 * makes, with the host's versions posed. */
	fg_clear_error();
	ck_assert_int_eq(fg_plugin_check_minor("c.so", FG_PLUGIN_COMPUTE, FG_ABI(major, s + 1),
					       FG_ABI(major, s + 1)), 0);
	ck_assert_str_eq(fg_last_error(), "");
	ck_assert_int_eq(fg_plugin_check_minor("c.so", FG_PLUGIN_COMPUTE, FG_ABI(major, s),
					       FG_ABI(major, s + 1)), 0);
	ck_assert_int_eq(fg_plugin_check_minor("s.so", FG_PLUGIN_STORAGE, FG_ABI(major, s),
					       FG_ABI(major, s)), 0);
	ck_assert_int_eq(fg_plugin_check_minor("s.so", FG_PLUGIN_STORAGE, FG_ABI(major, 0),
					       FG_ABI(major, s)), 0);
	ck_assert_int_eq(fg_plugin_check_minor("s.so", FG_PLUGIN_STORAGE, FG_ABI(major, s + 1),
					       FG_ABI(major, s)), -ENOTSUP);
	snprintf(want, sizeof(want), "s.so: storage plugin built for storage ABI %u.%u, newer "
		 "than this fgcore's storage ABI %u.%u: upgrade fgcore or rebuild the plugin "
		 "against this fgcore's headers", major, s + 1, major, s);
	ck_assert_str_eq(fg_last_error(), want);
	ck_assert_int_eq(fg_plugin_check_minor("k.so", FG_PLUGIN_CODEC, FG_ABI(major, s + 1),
					       FG_ABI(major, s)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "k.so: codec plugin built for codec ABI"));
	ck_assert_int_eq(fg_plugin_check_minor("t.so", FG_PLUGIN_TRANSPORT, FG_ABI(major, s + 1),
					       FG_ABI(major, s)), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "t.so: transport plugin built for "
				     "transport ABI"));

	/* Written before the split: FG_ABI_VERSION still builds and loads. */
	ck_assert_msg(open_bad("legacy_abi.so", &h) == 0, "%s", fg_last_error());
	ck_assert_uint_eq(h.plugin->abi_version, FG_ABI_VERSION);
	ck_assert_uint_le(h.plugin->abi_version, FG_CODEC_ABI_VERSION);
	fg_plugin_close(&h);
	/* Any kind's plugin saying 1.10, the last shared minor, passes. */
	for (uint32_t k = FG_PLUGIN_STORAGE; k <= FG_PLUGIN_TRANSPORT; k++)
		ck_assert_int_eq(fg_plugin_check_minor("old.so", k, FG_ABI(1, 10),
						       fg_plugin_kind_abi(k)), 0);
}
END_TEST

START_TEST(test_foreach)
{
	char *tmp = make_tmpdir();
	char p[PATH_MAX + 64], path[3 * PATH_MAX];
	struct seen s = { .n = 0 };

	snprintf(p, sizeof(p), "%s/codec_skeleton.so", tmp);
	write_file(p, "shadows the real one\n");
	snprintf(p, sizeof(p), "%s/zz_text.so", tmp);
	write_file(p, "text\n");
	snprintf(p, sizeof(p), "%s/.hidden.so", tmp);
	write_file(p, "hidden\n");
	snprintf(p, sizeof(p), "%s/readme.txt", tmp);
	write_file(p, "not a .so\n");
	snprintf(p, sizeof(p), "%s/dir.so", tmp);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	/* Empty entries are ignored; a missing directory is skipped. */
	snprintf(path, sizeof(path), ":%s::%s/missing:%s:", tmp, tmp, skel_dir);
	use_path(path);
	ck_assert_int_eq(fg_plugin_foreach(collect, &s), 0);
	ck_assert_int_ge(s.n, 4);
	snprintf(p, sizeof(p), "%s/codec_skeleton.so", tmp);
	ck_assert_str_eq(s.paths[0], p);
	snprintf(p, sizeof(p), "%s/zz_text.so", tmp);
	ck_assert_str_eq(s.paths[1], p);
	/* the skeleton dir's codec_skeleton.so is shadowed by the first one */
	snprintf(p, sizeof(p), "%s/compute_skeleton.so", skel_dir);
	ck_assert_str_eq(s.paths[2], p);
	snprintf(p, sizeof(p), "%s/storage_skeleton.so", skel_dir);
	ck_assert_str_eq(s.paths[3], p);
	for (int i = 4; i < s.n && i < 16; i++)
		ck_assert_ptr_null(strstr(s.paths[i], "codec_skeleton.so"));

	/* fg_plugin_load takes the first one too: the text file, refused. */
	{
		struct fg_plugin_handle h;

		ck_assert_int_eq(fg_plugin_load("codec_skeleton", 0, &h), -ENOEXEC);
		ck_assert_ptr_nonnull(strstr(fg_last_error(), tmp));
	}

	/* A callback's non-zero return stops the walk and is returned. */
	memset(&s, 0, sizeof(s));
	s.stop_after = 2;
	ck_assert_int_eq(fg_plugin_foreach(collect, &s), 7);
	ck_assert_int_eq(s.n, 2);

	fg_plugin_search_path(path, sizeof(path));
	ck_assert_ptr_nonnull(strstr(path, skel_dir));
	ck_assert_ptr_null(strstr(path, "::"));
	rm_rf(tmp);
	free(tmp);
}
END_TEST

/* ---- options ------------------------------------------------------------------------ */

struct test_opts {
	int b;
	int64_t i, j;
	uint64_t s;
	char str[FG_OPT_STRING_MAX];
	double d;
};

static const struct fg_option test_options[] = {
	{ "b", FG_OPT_BOOL, "yes", "a bool", offsetof(struct test_opts, b), 0, 0 },
	{ "i", FG_OPT_INT, "7", "ranged", offsetof(struct test_opts, i), -5, 100 },
	{ "j", FG_OPT_INT, NULL, "unranged", offsetof(struct test_opts, j), 0, 0 },
	{ "s", FG_OPT_SIZE, "64K", "a size", offsetof(struct test_opts, s), 0, 0 },
	{ "str", FG_OPT_STRING, "hello", "a string", offsetof(struct test_opts, str), 0, 0 },
	{ "d", FG_OPT_DOUBLE, "0.5", "a fraction", offsetof(struct test_opts, d), 0, 1 },
	{ NULL, 0, NULL, NULL, 0, 0, 0 },
};

static const struct fg_plugin test_plugin = {
	.abi_version = FG_CODEC_ABI_VERSION,
	.kind = FG_PLUGIN_CODEC,
	.name = "opts_test",
	.options = test_options,
	.opts_size = sizeof(struct test_opts),
};

static int set(struct test_opts *o, const char *key, const char *value)
{
	return fg_plugin_opts_set(&test_plugin, o, key, value, "x.ini:12");
}

START_TEST(test_opts_defaults)
{
	struct test_opts *o = fg_plugin_opts_new(&test_plugin);

	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(o->b, 1);
	ck_assert_int_eq(o->i, 7);
	ck_assert_int_eq(o->j, 0);
	ck_assert_uint_eq(o->s, 65536);
	ck_assert_str_eq(o->str, "hello");
	ck_assert_double_eq(o->d, 0.5);
	free(o);
}
END_TEST

START_TEST(test_opts_bool)
{
	static const char *const yes[] = { "true", "TRUE", "yes", "Yes", "on", "1" };
	static const char *const no[] = { "false", "False", "no", "NO", "off", "0" };
	static const char *const bad[] = { "", "2", "tru", "y", "enabled", " true", "-1" };
	struct test_opts o = { 0 };

	for (size_t k = 0; k < 6; k++) {
		o.b = 0;
		ck_assert_int_eq(set(&o, "b", yes[k]), 0);
		ck_assert_int_eq(o.b, 1);
		ck_assert_int_eq(set(&o, "b", no[k]), 0);
		ck_assert_int_eq(o.b, 0);
	}
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		o.b = 5;
		ck_assert_int_eq(set(&o, "b", bad[k]), -EINVAL);
		ck_assert_int_eq(o.b, 5); /* untouched on error */
		ck_assert_ptr_nonnull(strstr(fg_last_error(), "not a boolean, use true, false, yes, "
					     "no, on, off, 1 or 0"));
	}
	ck_assert_int_eq(set(&o, "b", "maybe"), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "x.ini:12: b = 'maybe' (option of plugin opts_test): "
			 "not a boolean, use true, false, yes, no, on, off, 1 or 0");
}
END_TEST

START_TEST(test_opts_int)
{
	struct test_opts o = { 0 };

	ck_assert_int_eq(set(&o, "i", "100"), 0);
	ck_assert_int_eq(o.i, 100);
	ck_assert_int_eq(set(&o, "i", "-5"), 0);
	ck_assert_int_eq(o.i, -5);
	ck_assert_int_eq(set(&o, "i", "101"), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "x.ini:12: i = '101' (option of plugin opts_test): "
			 "out of range, use an integer from -5 to 100");
	ck_assert_int_eq(set(&o, "i", "-6"), -EINVAL);
	ck_assert_int_eq(set(&o, "i", "1x"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "not an integer, use an integer from -5 to 100"));
	ck_assert_int_eq(set(&o, "i", ""), -EINVAL);
	ck_assert_int_eq(set(&o, "i", " 5"), -EINVAL);
	ck_assert_int_eq(set(&o, "i", "+5"), -EINVAL);
	ck_assert_int_eq(set(&o, "i", "0x10"), -EINVAL);
	ck_assert_int_eq(set(&o, "i", "1.0"), -EINVAL);
	ck_assert_int_eq(o.i, -5);
	/* unranged: the whole int64_t */
	ck_assert_int_eq(set(&o, "j", "-9223372036854775808"), 0);
	ck_assert(o.j == INT64_MIN);
	ck_assert_int_eq(set(&o, "j", "9223372036854775807"), 0);
	ck_assert(o.j == INT64_MAX);
	ck_assert_int_eq(set(&o, "j", "9223372036854775808"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "out of range, use a decimal integer"));
}
END_TEST

START_TEST(test_opts_size)
{
	static const struct {
		const char *text;
		uint64_t v;
	} good[] = {
		{ "0", 0 }, { "4096", 4096 }, { "4K", 4096 }, { "4k", 4096 }, { "4KiB", 4096 },
		{ "4kib", 4096 }, { "2M", 2u << 20 }, { "2MiB", 2u << 20 }, { "3G", 3ull << 30 },
		{ "3 GiB", 3ull << 30 }, { "1T", 1ull << 40 }, { "5B", 5 }, { "5b", 5 },
		{ "16777215T", 16777215ull << 40 },
		{ "18446744073709551615", UINT64_MAX },
	};
	static const char *const bad[] = { "", "-1", "1.5G", "4X", "4KB", "K", "4 ", " 4",
					   "16777216T", "18446744073709551616", "4  K", "0x10" };
	struct test_opts o = { 0 };

	for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
		o.s = 1;
		ck_assert_msg(set(&o, "s", good[k].text) == 0, "%s: %s", good[k].text,
			      fg_last_error());
		ck_assert_msg(o.s == good[k].v, "%s: %llu", good[k].text, (unsigned long long)o.s);
	}
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		o.s = 1;
		ck_assert_msg(set(&o, "s", bad[k]) == -EINVAL, "'%s' accepted", bad[k]);
		ck_assert_uint_eq(o.s, 1);
		ck_assert_ptr_nonnull(strstr(fg_last_error(), "use a byte count with an optional "
					     "suffix K, M, G or T"));
	}
	ck_assert_int_eq(set(&o, "s", "16777216T"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "too large"));
	ck_assert_int_eq(set(&o, "s", "4X"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "unknown suffix 'X'"));
}
END_TEST

START_TEST(test_opts_string_double)
{
	struct test_opts o = { 0 };
	char s[FG_OPT_STRING_MAX + 1];
	char buf[64];
	const struct fg_option *d = fg_plugin_find_option(&test_plugin, "d");

	memset(s, 'a', FG_OPT_STRING_MAX - 1);
	s[FG_OPT_STRING_MAX - 1] = '\0';
	ck_assert_int_eq(set(&o, "str", s), 0);
	ck_assert_uint_eq(strlen(o.str), FG_OPT_STRING_MAX - 1);
	s[FG_OPT_STRING_MAX - 1] = 'a';
	s[FG_OPT_STRING_MAX] = '\0';
	ck_assert_int_eq(set(&o, "str", s), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "too long (256 bytes), use at most 255 bytes"));
	ck_assert_int_eq(set(&o, "str", ""), 0);
	ck_assert_str_eq(o.str, "");

	ck_assert_int_eq(set(&o, "d", "0.25"), 0);
	ck_assert_double_eq(o.d, 0.25);
	ck_assert_int_eq(set(&o, "d", "1"), 0);
	ck_assert_int_eq(set(&o, "d", "1.5"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "out of range, use a decimal number from 0 to 1"));
	ck_assert_int_eq(set(&o, "d", "nan"), -EINVAL);
	ck_assert_int_eq(set(&o, "d", "inf"), -EINVAL);
	ck_assert_int_eq(set(&o, "d", "abc"), -EINVAL);
	ck_assert_int_eq(set(&o, "d", ""), -EINVAL);
	ck_assert_double_eq(o.d, 1);
	o.d = 0.1;
	ck_assert_str_eq(fg_plugin_opt_format(d, &o, buf, sizeof(buf)), "0.1");
}
END_TEST

START_TEST(test_opts_unknown_and_format)
{
	struct test_opts o = { 0 };
	char buf[64];
	static const struct fg_plugin none = { .abi_version = FG_CODEC_ABI_VERSION,
					       .kind = FG_PLUGIN_CODEC, .name = "bare" };
	void *p;

	ck_assert_int_eq(set(&o, "width", "3"), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "x.ini:12: unknown key 'width' for plugin opts_test, its "
			 "options are: b, i, j, s, str, d");
	p = fg_plugin_opts_new(&none);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(fg_plugin_opts_set(&none, p, "x", "1", "-o tier.x=1"), -EINVAL);
	ck_assert_str_eq(fg_last_error(), "-o tier.x=1: unknown key 'x': plugin bare has no options");
	free(p);

	o.s = 3ull << 30;
	ck_assert_str_eq(fg_plugin_opt_format(&test_options[3], &o, buf, sizeof(buf)), "3G");
	o.s = 1536;
	ck_assert_str_eq(fg_plugin_opt_format(&test_options[3], &o, buf, sizeof(buf)), "1536");
	o.s = 1536 * 1024;
	ck_assert_str_eq(fg_plugin_opt_format(&test_options[3], &o, buf, sizeof(buf)), "1536K");
	o.b = 1;
	ck_assert_str_eq(fg_plugin_opt_format(&test_options[0], &o, buf, sizeof(buf)), "true");
	o.i = -3;
	ck_assert_str_eq(fg_plugin_opt_format(&test_options[1], &o, buf, sizeof(buf)), "-3");
}
END_TEST

/* ---- host services ------------------------------------------------------------------- */

static void *thread_error(void *arg)
{
	const struct fg_host *h = fg_core_host();

	(void)arg;
	fg_error(h, "set in a thread");
	return strdup(fg_last_error());
}

START_TEST(test_host_error)
{
	const struct fg_host *h = fg_core_host();
	pthread_t t;
	void *other;
	char big[3000];

	ck_assert_uint_eq(h->abi_version, FG_ABI_VERSION);
	ck_assert_int_ge(h->gpu_count, 0); /* the machine's count: tests/test_gpu_count */
	fg_error(h, "%s:%d: bad value\n\n", "f.ini", 3);
	ck_assert_str_eq(fg_last_error(), "f.ini:3: bad value");
	ck_assert_str_eq(fg_last_error_text(), "f.ini:3: bad value");
	FG_ERR("two\nlines");
	ck_assert_str_eq(fg_last_error(), "two lines");
	/* Adding context to the current error with itself as an argument. */
	FG_ERR("context: %s", fg_last_error());
	ck_assert_str_eq(fg_last_error(), "context: two lines");
	/* Long messages are cut, not overflowed. */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	FG_ERR("%s", big);
	ck_assert_uint_eq(strlen(fg_last_error()), 1023);
	/* Per thread. */
	FG_ERR("main");
	ck_assert_int_eq(pthread_create(&t, NULL, thread_error, NULL), 0);
	ck_assert_int_eq(pthread_join(t, &other), 0);
	ck_assert_str_eq(other, "set in a thread");
	free(other);
	ck_assert_str_eq(fg_last_error(), "main");
	fg_clear_error();
	ck_assert_str_eq(fg_last_error(), "");
	fg_core_host_set_gpu_count(2);
	ck_assert_int_eq(fg_core_host()->gpu_count, 2);
	fg_core_host_set_gpu_count(0);
}
END_TEST

START_TEST(test_host_log)
{
	const struct fg_host *h = fg_core_host();
	char tmpl[] = "/tmp/fgcore-test-log.XXXXXX";
	char text[512] = "";
	int fd = mkstemp(tmpl), saved;
	FILE *f;
	size_t n;

	ck_assert_int_ge(fd, 0);
	fflush(stderr);
	saved = dup(2);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(fd, 2), 0);
	fg_set_log_level(FG_LOG_WARN);
	fg_log(h, FG_LOG_INFO, "hidden %d", 1);
	fg_log(h, FG_LOG_WARN, "shown %d\n", 2);
	fg_log(h, FG_LOG_ERROR, "error %d", 3);
	fg_set_log_level(FG_LOG_DEBUG);
	FG_LOG(FG_LOG_DEBUG, "debug %d", 4);
	fg_set_log_level(FG_LOG_WARN);
	fflush(stderr);
	ck_assert_int_ge(dup2(saved, 2), 0);
	close(saved);
	close(fd);
	f = fopen(tmpl, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	unlink(tmpl);
	ck_assert_str_eq(text, "fgcore: warn: shown 2\nfgcore: error: error 3\n"
			 "fgcore: debug: debug 4\n");
}
END_TEST

/* ---- damaged ELF files ------------------------------------------------------------ */

/* A plugin truncated or with a foreign ELF header is refused before dlopen
 * (which would die of SIGBUS mapping segments past the end of the file). */
static unsigned char *read_whole(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	long n;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	ck_assert_int_gt(n, (long)sizeof(Elf64_Ehdr));
	rewind(f);
	b = malloc((size_t)n);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void write_bytes(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(b, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

static void elf_refused(const char *path, const char *fragment)
{
	struct fg_plugin_handle h;

	ck_assert_int_eq(fg_plugin_open_file(path, 0, NULL, &h), -ENOEXEC);
	ck_assert_msg(strstr(fg_last_error(), path) != NULL, "no file in: %s", fg_last_error());
	ck_assert_msg(strstr(fg_last_error(), fragment) != NULL, "'%s' not in: %s", fragment,
		      fg_last_error());
	ck_assert_ptr_null(strchr(fg_last_error(), '\n'));
}

START_TEST(test_damaged_elf)
{
	const char *b = getenv("FGCORE_BUILDDIR");
	char src[PATH_MAX], path[PATH_MAX + 32], *tmp = make_tmpdir();
	struct fg_plugin_handle h;
	unsigned char *elf, *copy;
	size_t len;

	snprintf(src, sizeof(src), "%s/plugins/codec/.libs/fp16.so", b && *b ? b : ".");
	elf = read_whole(src, &len);
	copy = malloc(len);
	ck_assert_ptr_nonnull(copy);

	/* the whole file loads: the check refuses no good plugin */
	snprintf(path, sizeof(path), "%s/fp16.so", tmp);
	write_bytes(path, elf, len);
	ck_assert_int_eq(fg_plugin_open_file(path, 0, NULL, &h), 0);
	ck_assert_str_eq(h.plugin->name, "fp16");
	fg_plugin_close(&h);

	/* cut inside the first segment, at half, one byte short, ... */
	const size_t cuts[] = { 0, 3, 63, 100, 1000, 4097, len / 2, len - 100, len - 1 };
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		snprintf(path, sizeof(path), "%s/cut%zu.so", tmp, cuts[i]);
		write_bytes(path, elf, cuts[i]);
		elf_refused(path, cuts[i] < 4 ? "not an ELF file" : "truncated");
	}
	/* ... and through the search path, by name */
	snprintf(path, sizeof(path), "%s/p", tmp);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/p/fp16.so", tmp);
	write_bytes(path, elf, len / 2);
	snprintf(path, sizeof(path), "%s/p", tmp);
	use_path(path);
	ck_assert_int_eq(fg_plugin_load("fp16", 0, &h), -ENOEXEC);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "truncated"));

	/* header fields of another build or kind of file */
	Elf64_Ehdr *eh = (Elf64_Ehdr *)copy;
	ck_assert_int_eq(elf[EI_CLASS], ELFCLASS64); /* the patches below are 64-bit */
	memcpy(copy, elf, len);
	eh->e_ident[EI_CLASS] = ELFCLASS32;
	snprintf(path, sizeof(path), "%s/class.so", tmp);
	write_bytes(path, copy, len);
	elf_refused(path, "a 32-bit ELF file; this build is 64-bit");

	memcpy(copy, elf, len);
	eh->e_type = ET_REL;
	snprintf(path, sizeof(path), "%s/rel.so", tmp);
	write_bytes(path, copy, len);
	elf_refused(path, "object file (.o), not a shared object");

	memcpy(copy, elf, len);
	eh->e_machine = (Elf64_Half)(eh->e_machine == EM_S390 ? EM_AARCH64 : EM_S390);
	snprintf(path, sizeof(path), "%s/machine.so", tmp);
	write_bytes(path, copy, len);
	elf_refused(path, "built for ELF machine");

	memcpy(copy, elf, len);
	eh->e_phoff = UINT64_MAX - 8; /* offset + size overflows */
	snprintf(path, sizeof(path), "%s/phoff.so", tmp);
	write_bytes(path, copy, len);
	elf_refused(path, "program headers at byte");

	memcpy(copy, elf, len);
	eh->e_shoff = (Elf64_Off)len - 8;
	snprintf(path, sizeof(path), "%s/shoff.so", tmp);
	write_bytes(path, copy, len);
	elf_refused(path, "the section headers start at byte");

	/* a segment reaching past the end of an otherwise complete file */
	memcpy(copy, elf, len);
	Elf64_Phdr *ph = (Elf64_Phdr *)(copy + eh->e_phoff);
	for (unsigned i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD) {
			ph[i].p_filesz = ph[i].p_memsz = (Elf64_Xword)len * 2;
			break;
		}
	snprintf(path, sizeof(path), "%s/segment.so", tmp);
	write_bytes(path, copy, len);
	elf_refused(path, "(PT_LOAD, bytes ");

	free(copy);
	free(elf);
	rm_rf(tmp);
	free(tmp);
}
END_TEST

Suite *loader_suite(void)
{
	Suite *s = suite_create("loader");
	TCase *tc = tcase_create("loader");

	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_wrong_kind_and_name);
	tcase_add_test(tc, test_bad_names);
	tcase_add_test(tc, test_not_found);
	tcase_add_test(tc, test_skeleton_storage);
	tcase_add_test(tc, test_skeleton_codec);
	tcase_add_test(tc, test_skeleton_compute);
	tcase_add_test(tc, test_compute_abi10);
	tcase_add_test(tc, test_abi_per_kind);
	tcase_add_test(tc, test_foreach);
	tcase_add_test(tc, test_opts_defaults);
	tcase_add_test(tc, test_opts_bool);
	tcase_add_test(tc, test_opts_int);
	tcase_add_test(tc, test_opts_size);
	tcase_add_test(tc, test_opts_string_double);
	tcase_add_test(tc, test_opts_unknown_and_format);
	tcase_add_test(tc, test_host_error);
	tcase_add_test(tc, test_host_log);
	tcase_add_test(tc, test_damaged_elf);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(loader_suite());
	int failed;

	find_dirs();
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
