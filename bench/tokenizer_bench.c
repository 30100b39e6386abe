/* bench/tokenizer_bench.c - BPE encode/decode throughput (GPT-2 files or tokenizer.json).
 *
 *   tokenizer_bench [-d DIR] [-s MIB] [-r REPEAT] [-t THREADS] [FILE]
 *
 * DIR holds vocab.json + merges.txt or a tokenizer.json, loaded as
 * fg_tokenizer_load_dir does (default $FGCORE_TESTDATA/tokenizer/gpt2).
 * FILE is the text to encode; without it, about MIB MiB (default 20) of text
 * is made from DIR/golden.json's texts and built-in prose (English, other
 * Latin-script languages, Cyrillic, Greek, CJK, emoji, code, numbers).
 * Each of THREADS threads (default 1) encodes the whole text on the same
 * tokenizer; the best of REPEAT runs is reported, per thread (= per core).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"

static const char *const prose[] = {
	"The quick brown fox jumps over the lazy dog. It wasn't the first time, and it "
	"won't be the last: foxes are like that. They'll say they've learned, but we'd "
	"know better.\n\n",
	"In 1969, Apollo 11 landed on the Moon; 600 million people watched. The lunar module "
	"(\"Eagle\") touched down at 20:17:40 UTC, with about 25 seconds of fuel left.\n",
	"Throughput-oriented inference runs large batches: latency matters less than "
	"tokens per second per dollar. Weights, activations and the KV cache move between "
	"GPU memory, pinned host memory and NVMe disks.\n",
	"Der Zug f\xc3\xa4hrt um 8:15 Uhr ab. \xc3\x9c" "ber die Br\xc3\xbc" "cke gehen wir zu "
	"Fu\xc3\x9f; das Wetter ist sch\xc3\xb6n.\n",
	"Le caf\xc3\xa9 est \xc3\xa0 c\xc3\xb4t\xc3\xa9 de la gare. O\xc3\xb9 est la "
	"biblioth\xc3\xa8que ? \xc3\x80 gauche, apr\xc3\xa8s le march\xc3\xa9.\n",
	"\xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0 \xe2\x80\x94 \xd1\x81\xd1\x82\xd0\xbe"
	"\xd0\xbb\xd0\xb8\xd1\x86\xd0\xb0 \xd0\xa0\xd0\xbe\xd1\x81\xd1\x81\xd0\xb8\xd0\xb8. "
	"\xce\x97 \xce\x91\xce\xb8\xce\xae\xce\xbd\xce\xb1 \xce\xb5\xce\xaf\xce\xbd\xce\xb1\xce"
	"\xb9 \xce\xb7 \xcf\x80\xcf\x81\xcf\x89\xcf\x84\xce\xb5\xcf\x8d\xce\xbf\xcf\x85\xcf\x83"
	"\xce\xb1.\n",
	"\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf\xe6\x97\xa5\xe6\x9c\xac\xe3\x81\xae\xe9\xa6\x96"
	"\xe9\x83\xbd\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82\xe5\x8c\x97\xe4\xba\xac\xe6\x98\xaf"
	"\xe4\xb8\xad\xe5\x9b\xbd\xe7\x9a\x84\xe9\xa6\x96\xe9\x83\xbd\xe3\x80\x82 "
	"\xf0\x9f\x98\x80\xf0\x9f\x9a\x80\xf0\x9f\x8e\x89\n",
	"def tokenize(text):\n    for i, piece in enumerate(split(text)):\n"
	"        yield piece.encode('utf-8')  # bytes, not str\n\n",
	"    {\"id\": 42, \"scores\": [0.25, 0.5, 0.125], \"ok\": true}\n",
	"Prices: $3.99, \xe2\x82\xac" "4.50, \xc2\xa3" "2.75 \xe2\x80\x94 up 12.5% since 2023-01-01.\t\t"
	"See https://example.org/path?q=1&r=2.\n",
};

struct buf {
	char *p;
	size_t n, cap;
};

static int buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1 << 20;
		char *p;

		while (cap < b->n + n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

/* Golden texts (if any) and prose, repeated with a running number so that
 * the text is not one short period. */
static int make_text(const char *dir, size_t want, struct buf *out)
{
	char path[4200], num[32];
	json_t *g = NULL, *e;
	json_error_t jerr;
	size_t i, round = 0;

	snprintf(path, sizeof(path), "%s/golden.json", dir);
	if (access(path, R_OK) == 0)
		g = json_load_file(path, 0, &jerr);
	while (out->n < want) {
		int n = snprintf(num, sizeof(num), "[%zu] ", round++);

		if (buf_add(out, num, (size_t)n))
			return -ENOMEM;
		for (i = 0; i < sizeof(prose) / sizeof(prose[0]); i++)
			if (buf_add(out, prose[i], strlen(prose[i])))
				return -ENOMEM;
		if (json_is_array(g)) {
			json_array_foreach(g, i, e) {
				json_t *t = json_object_get(e, "text");

				if (json_is_string(t) &&
				    (buf_add(out, json_string_value(t), json_string_length(t)) ||
				     buf_add(out, "\n", 1)))
					return -ENOMEM;
			}
		}
	}
	json_decref(g);
	return 0;
}

static int read_text(const char *path, struct buf *out)
{
	FILE *f = fopen(path, "rb");
	char chunk[1 << 16];
	size_t n;

	if (!f) {
		fprintf(stderr, "tokenizer_bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (buf_add(out, chunk, n)) {
			fclose(f);
			return -ENOMEM;
		}
	fclose(f);
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct job {
	const struct fg_tokenizer *t;
	const struct buf *text;
	size_t ntok;
	int rc;
};

static void *encode_job(void *p)
{
	struct job *j = p;
	int32_t *ids;

	j->rc = fg_tokenizer_encode(j->t, j->text->p, j->text->n, &ids, &j->ntok);
	if (!j->rc)
		free(ids);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: tokenizer_bench [-d DIR] [-s MIB] [-r REPEAT] [-t THREADS] [FILE]\n"
			"  DIR: tokenizer.json, or vocab.json + merges.txt (default "
			"$FGCORE_TESTDATA/tokenizer/gpt2)\n");
}

int main(int argc, char **argv)
{
	const char *td = getenv("FGCORE_TESTDATA");
	char dirbuf[4096];
	const char *dir = NULL;
	long mib = 20, repeat = 3, threads = 1;
	struct buf text = { 0 };
	struct fg_tokenizer *t;
	struct job *jobs;
	pthread_t *th;
	double best = 1e300, t0, dec_time;
	int32_t *ids;
	size_t n, dlen;
	char *back;
	int opt, rc;

	while ((opt = getopt(argc, argv, "d:s:r:t:h")) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 's': mib = strtol(optarg, NULL, 10); break;
		case 'r': repeat = strtol(optarg, NULL, 10); break;
		case 't': threads = strtol(optarg, NULL, 10); break;
		default: usage(); return 2;
		}
	}
	if (mib < 1 || mib > 4096 || repeat < 1 || repeat > 100 || threads < 1 || threads > 256) {
		usage();
		return 2;
	}
	if (!dir) {
		if (!td || !*td) {
			fprintf(stderr, "tokenizer_bench: give -d DIR or set FGCORE_TESTDATA\n");
			return 2;
		}
		snprintf(dirbuf, sizeof(dirbuf), "%s/tokenizer/gpt2", td);
		dir = dirbuf;
	}
	t0 = now();
	rc = fg_tokenizer_load_dir(dir, &t);
	if (rc) {
		fprintf(stderr, "tokenizer_bench: %s\n", fg_last_error());
		return 1;
	}
	printf("load: %s: %zu tokens in %.3f s\n", dir, fg_tokenizer_vocab_size(t), now() - t0);
	rc = optind < argc ? read_text(argv[optind], &text)
			   : make_text(dir, (size_t)mib << 20, &text);
	if (rc) {
		fprintf(stderr, "tokenizer_bench: cannot prepare the text: %s\n", strerror(-rc));
		return 1;
	}
	printf("text: %s, %zu bytes\n", optind < argc ? argv[optind] : "generated", text.n);

	jobs = calloc((size_t)threads, sizeof(*jobs));
	th = calloc((size_t)threads, sizeof(*th));
	if (!jobs || !th)
		return 1;
	for (long r = 0; r < repeat; r++) {
		double s = now(), dt;

		for (long i = 0; i < threads; i++) {
			jobs[i] = (struct job){ .t = t, .text = &text };
			if (pthread_create(&th[i], NULL, encode_job, &jobs[i]))
				return 1;
		}
		for (long i = 0; i < threads; i++) {
			pthread_join(th[i], NULL);
			if (jobs[i].rc) {
				fprintf(stderr, "tokenizer_bench: encode: %s\n", fg_last_error());
				return 1;
			}
		}
		dt = now() - s;
		if (dt < best)
			best = dt;
	}
	printf("encode: %ld thread(s), best of %ld: %.3f s, %.2f MB/s per core, "
	       "%.3f Mtokens/s per core, %.2f bytes/token (%zu tokens)\n",
	       threads, repeat, best, text.n / best / 1e6, jobs[0].ntok / best / 1e6,
	       (double)text.n / (double)(jobs[0].ntok ? jobs[0].ntok : 1), jobs[0].ntok);
	if (threads > 1)
		printf("encode: all threads together: %.2f MB/s\n", threads * text.n / best / 1e6);

	/* Decode, and check the round trip while at it. */
	if (fg_tokenizer_encode(t, text.p, text.n, &ids, &n))
		return 1;
	t0 = now();
	rc = fg_tokenizer_decode(t, ids, n, &back, &dlen);
	dec_time = now() - t0;
	if (rc) {
		fprintf(stderr, "tokenizer_bench: decode: %s\n", fg_last_error());
		return 1;
	}
	printf("decode: %.3f s, %.2f MB/s, %.3f Mtokens/s; round trip %s\n", dec_time,
	       dlen / dec_time / 1e6, n / dec_time / 1e6,
	       dlen == text.n && !memcmp(back, text.p, dlen) ? "exact" : "DIFFERS");
	free(back);
	free(ids);
	free(jobs);
	free(th);
	free(text.p);
	fg_tokenizer_free(t);
	return 0;
}
