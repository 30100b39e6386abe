/* tests/test_hostile_files.c - a FIFO (or a device, a directory) where a
 * loader expects a file is refused at once, with one line naming the file and
 * what it is, never a hang in open(2): config.json, model.safetensors, the
 * shard index, a shard, a FlexGen .npy file, the INI configuration.  Every
 * case runs under Check's per-test timeout, so a hang fails the test. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fgcore/fgcore.h>
#include "core/model/npy.h"
#include "core/model/safetensors.h"
#include "core/model/weights.h"
#include "core/util/error.h"
#include "core/util/fileio.h"
#include "tests/test_tmpdir.h"

/* An OPT config.json, as Hugging Face writes it (fields the loader reads). */
static const char opt_config[] =
	"{\"activation_function\": \"relu\", \"architectures\": [\"OPTForCausalLM\"],"
	" \"bos_token_id\": 2, \"do_layer_norm_before\": true, \"enable_bias\": true,"
	" \"eos_token_id\": 2, \"ffn_dim\": 256, \"hidden_size\": 64,"
	" \"layer_norm_elementwise_affine\": true, \"max_position_embeddings\": 2048,"
	" \"model_type\": \"opt\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2,"
	" \"pad_token_id\": 1, \"tie_word_embeddings\": true, \"vocab_size\": 50272,"
	" \"word_embed_proj_dim\": 64, \"_remove_final_layer_norm\": false}\n";

static char *path_in(const char *dir, const char *name)
{
	char *p;

	ck_assert_int_gt(asprintf(&p, "%s/%s", dir, name), 0);
	return p;
}

static char *make_dir(const char *name)
{
	char *d = path_in(tmp_root, name);

	ck_assert_int_eq(mkdir(d, 0700), 0);
	return d;
}

static void put(const char *dir, const char *name, const char *text)
{
	char *p = path_in(dir, name);
	FILE *f = fopen(p, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	free(p);
}

static char *fifo(const char *dir, const char *name)
{
	char *p = path_in(dir, name);

	ck_assert_int_eq(mkfifo(p, 0600), 0);
	return p;
}

/* The last error is one line naming path as "a FIFO". */
static void refused_fifo(const char *path)
{
	const char *e = fg_last_error();

	ck_assert_msg(strstr(e, path) != NULL, "'%s' not named in: %s", path, e);
	ck_assert_msg(strstr(e, "not a regular file (it is a FIFO (named pipe))") != NULL,
		      "no reason in: %s", e);
	ck_assert_ptr_null(strchr(e, '\n'));
}

static void setup(void)
{
	tmp_make("fgcore-hostile");
}

START_TEST(test_small_file)
{
	char *p = fifo(tmp_root, "small.json"), *buf = NULL;
	size_t len;

	ck_assert_int_eq(fg_read_small_file(p, 1 << 20, &buf, &len), -EINVAL);
	refused_fifo(p);
	ck_assert_ptr_null(buf);
	ck_assert_int_eq(fg_read_small_file("/dev/zero", 1 << 20, &buf, &len), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "/dev/zero: not a regular file (it is a character device)"));
	ck_assert_int_eq(fg_read_small_file(tmp_root, 1 << 20, &buf, &len), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "(it is a directory)"));
	free(p);
}
END_TEST

START_TEST(test_config_json)
{
	char *dir = make_dir("m"), *p = fifo(dir, "config.json");
	struct fg_weights *w = (void *)1;

	ck_assert_int_eq(fg_weights_open(dir, NULL, &w), -EINVAL);
	ck_assert_ptr_null(w);
	refused_fifo(p);
	free(p);
	free(dir);
}
END_TEST

START_TEST(test_model_safetensors)
{
	char *dir = make_dir("m"), *p;
	struct fg_weights *w;

	put(dir, "config.json", opt_config);
	p = fifo(dir, "model.safetensors");
	ck_assert_int_eq(fg_weights_open(dir, NULL, &w), -EINVAL);
	refused_fifo(p);
	free(p);
	free(dir);
}
END_TEST

START_TEST(test_shard_index_and_shard)
{
	char *dir = make_dir("m"), *p;
	struct fg_st_file *st = NULL;
	struct fg_weights *w;

	put(dir, "config.json", opt_config);
	p = fifo(dir, "model.safetensors.index.json");
	ck_assert_int_eq(fg_weights_open(dir, NULL, &w), -EINVAL);
	refused_fifo(p);
	free(p);
	/* a shard is opened by fg_st_open, as model.safetensors is */
	p = fifo(dir, "model-00001-of-00002.safetensors");
	ck_assert_int_eq(fg_st_open(p, &st), -EINVAL);
	ck_assert_ptr_null(st);
	refused_fifo(p);
	free(p);
	free(dir);
}
END_TEST

START_TEST(test_npy_folder)
{
	char *dir = make_dir("opt-125m-np"), *p;
	struct fg_npy_info info;
	struct fg_weights *w;

	p = fifo(dir, "decoder.embed_tokens.weight");
	ck_assert_int_eq(fg_weights_open(dir, NULL, &w), -EINVAL);
	refused_fifo(p);
	ck_assert_int_eq(fg_npy_open(p, &info), -EINVAL);
	refused_fifo(p);
	free(p);
	free(dir);
}
END_TEST

START_TEST(test_ini)
{
	char *p = fifo(tmp_root, "fgcore.ini");
	struct fg_config *c;

	ck_assert_int_eq(fg_config_new(&c), 0);
	ck_assert_int_eq(fg_config_load(c, p), -EINVAL);
	refused_fifo(p);
	ck_assert_int_eq(fg_config_load(c, tmp_root), -EINVAL);
	ck_assert_ptr_nonnull(strstr(fg_last_error(), "(it is a directory)"));
	/* the null device stays an empty configuration */
	ck_assert_int_eq(fg_config_load(c, "/dev/null"), 0);
	fg_config_free(c);
	free(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hostile_files");
	TCase *tc = tcase_create("hostile_files");
	SRunner *sr;
	int failed;

	/* a hang in open(2) is a failure after this many seconds, not a stuck run */
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, setup, tmp_teardown);
	tcase_add_test(tc, test_small_file);
	tcase_add_test(tc, test_config_json);
	tcase_add_test(tc, test_model_safetensors);
	tcase_add_test(tc, test_shard_index_and_shard);
	tcase_add_test(tc, test_npy_folder);
	tcase_add_test(tc, test_ini);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
