/* bench/disk_bench.c - sequential bandwidth of the file tiers through their plugins.
 *
 *   disk_bench [-d DIR] [-s SIZE] [-b BLOCK] [-q INFLIGHT] [-p PLUGIN,...]
 *              [-o KEY=VALUE]... [-k] [-v]
 *
 * For each plugin (default: posix_file, io_uring_nvme, libaio_nvme; those not
 * built are skipped) a tier is opened with O_DIRECT on the file
 * DIR/fgcore-disk-bench.dat (default DIR /var/tmp), SIZE bytes (default 2G)
 * are written and then read back sequentially, requests of BLOCK bytes
 * (default 4M) with INFLIGHT of them (default 32) always queued through
 * submit/reap, and the bandwidth of each pass is printed in GB/s (10^9 bytes
 * per second).  posix_file gets as many worker threads as requests in flight
 * (at most 64); the queue-driven plugins keep their defaults (1 MiB requests,
 * queue depth 128) unless -o says otherwise: -o KEY=VALUE sets that option
 * of every plugin that has it (e.g. -o sqpoll=true -o queue_depth=256).
 * O_DIRECT bypasses the page cache, so no cache needs dropping between passes.
 * Every request's first bytes are checked.
 *
 * The equivalent dd command is printed for comparison; -k keeps the file so
 * that it can be run (otherwise the file is removed at the end).
 * -v logs each plugin's setup (ring flags, registered buffers).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/plugin/loader.h"
#include "core/tier/tier.h"
#include "core/util/error.h"
#include "core/util/parse.h"

#define MAX_INFLIGHT 1024
#define MAX_SETTINGS 16

struct bench {
	const char *dir;
	char file[PATH_MAX];
	uint64_t size, block;
	unsigned inflight;
	unsigned char *bufs;
	char *settings[MAX_SETTINGS]; /* "key=value" from -o */
	int nsettings;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int set_opt(const struct fg_plugin *p, void *opts, const char *key, const char *val)
{
	if (!fg_plugin_find_option(p, key))
		return 0;
	return fg_plugin_opts_set(p, opts, key, val, "disk_bench");
}

static int open_tier(struct bench *b, const char *name, struct fg_tier *t)
{
	struct fg_plugin_handle h;
	char workers[16];
	void *opts;
	int err;

	err = fg_plugin_load(name, FG_PLUGIN_STORAGE, &h);
	if (err)
		return err;
	if (fg_plugin_probe(&h) == 0) {
		fprintf(stderr, "disk_bench: %s is not usable on this machine (probe); skipped\n",
			name);
		fg_plugin_close(&h);
		return -ENOTSUP;
	}
	opts = fg_plugin_opts_new(h.plugin);
	if (!opts) {
		fg_plugin_close(&h);
		return -ENOMEM;
	}
	snprintf(workers, sizeof(workers), "%u", b->inflight < 64 ? b->inflight : 64);
	if (set_opt(h.plugin, opts, "file", b->file) ||
	    set_opt(h.plugin, opts, "o_direct", "true") ||
	    set_opt(h.plugin, opts, "workers", workers)) {
		free(opts);
		fg_plugin_close(&h);
		return -EINVAL;
	}
	for (int i = 0; i < b->nsettings; i++) {
		char key[64];
		const char *eq = strchr(b->settings[i], '=');

		snprintf(key, sizeof(key), "%.*s", (int)(eq - b->settings[i]), b->settings[i]);
		if (set_opt(h.plugin, opts, key, eq + 1)) {
			free(opts);
			fg_plugin_close(&h);
			return -EINVAL;
		}
	}
	return fg_tier_open(t, "disk", &h, opts, 0);
}

/* One sequential pass with b->inflight requests always queued; seconds, or < 0. */
static double pass(struct bench *b, struct fg_tier *t, const struct fg_region *r,
		   enum fg_io_op op)
{
	static struct fg_io io[MAX_INFLIGHT];
	struct fg_io *ios[MAX_INFLIGHT], *done[MAX_INFLIGHT];
	uint64_t next = 0, finished = 0;
	unsigned free_slots[MAX_INFLIGHT], nfree = 0;
	double t0;

	for (unsigned i = 0; i < b->inflight; i++)
		free_slots[nfree++] = b->inflight - 1 - i;
	t0 = now_s();
	while (finished < b->size) {
		unsigned n = 0;
		int got;

		while (nfree && next < b->size) {
			unsigned s = free_slots[--nfree];
			unsigned char *buf = b->bufs + (size_t)s * b->block;
			uint64_t len = b->size - next < b->block ? b->size - next : b->block;

			if (op == FG_IO_WRITE)
				memcpy(buf, &next, sizeof(next)); /* stamp: checked on read */
			io[s] = (struct fg_io){ .op = op, .region = r, .offset = next, .buf = buf,
						.len = (size_t)len, .user = (void *)(uintptr_t)s };
			ios[n++] = &io[s];
			next += len;
		}
		if (n && fg_tier_submit(t, ios, n) != 0) {
			fprintf(stderr, "disk_bench: submit: %s\n", fg_last_error());
			return -1;
		}
		got = fg_tier_reap(t, done, 1, b->inflight);
		if (got <= 0) {
			fprintf(stderr, "disk_bench: reap: %s\n",
				got < 0 ? fg_last_error() : "nothing");
			return -1;
		}
		for (int i = 0; i < got; i++) {
			struct fg_io *d = done[i];
			uint64_t stamp;

			if (d->result) {
				fprintf(stderr, "disk_bench: %s at %" PRIu64 " failed: %s\n",
					op == FG_IO_READ ? "read" : "write", d->offset,
					strerror(-d->result));
				return -1;
			}
			memcpy(&stamp, d->buf, sizeof(stamp));
			if (op == FG_IO_READ && stamp != d->offset) {
				fprintf(stderr, "disk_bench: the request at %" PRIu64 " read back "
					"the data of %" PRIu64 "\n", d->offset, stamp);
				return -1;
			}
			finished += d->len;
			free_slots[nfree++] = (unsigned)(uintptr_t)d->user;
		}
	}
	return now_s() - t0;
}

static int run_plugin(struct bench *b, const char *name, bool keep)
{
	struct fg_tier t;
	struct fg_region r;
	double w, rd;
	int err;

	err = open_tier(b, name, &t);
	if (err == -ENOENT) {
		printf("%-16s (not built)\n", name);
		return 0;
	}
	if (err) {
		fprintf(stderr, "disk_bench: %s: %s\n", name, fg_last_error());
		return err == -ENOTSUP ? 0 : err;
	}
	err = fg_tier_alloc(&t, b->size, &r);
	if (err) {
		fprintf(stderr, "disk_bench: %s: %s\n", name, fg_last_error());
		fg_tier_close(&t);
		return err;
	}
	w = pass(b, &t, &r, FG_IO_WRITE);
	rd = w < 0 ? -1 : pass(b, &t, &r, FG_IO_READ);
	if (w > 0 && rd > 0)
		printf("%-16s %10.2f %10.2f\n", name, (double)b->size / w / 1e9,
		       (double)b->size / rd / 1e9);
	fflush(stdout);
	if (keep) {
		/* Freeing would shrink the file: leave the data for dd (and the
		 * core's "closed with ... allocated" warning unsaid). */
		int level = fg_log_level();

		fg_set_log_level(FG_LOG_ERROR);
		fg_tier_close(&t);
		fg_set_log_level(level);
	} else {
		fg_tier_free(&t, &r);
		fg_tier_close(&t);
	}
	return w < 0 || rd < 0 ? -EIO : 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: disk_bench [-d DIR] [-s SIZE] [-b BLOCK] [-q INFLIGHT] "
		"[-p PLUGIN,...] [-o KEY=VALUE]... [-k] [-v]\n"
		"  SIZE and BLOCK take K, M, G suffixes (defaults 2G, 4M); INFLIGHT 1..%d "
		"(default 32)\n", MAX_INFLIGHT);
	return 2;
}

int main(int argc, char **argv)
{
	struct bench b = { .dir = "/var/tmp", .size = (uint64_t)2 << 30, .block = 4 << 20,
			   .inflight = 32 };
	char plugins[512] = "posix_file,io_uring_nvme,libaio_nvme", why[256], sz[32];
	bool keep = false;
	int64_t q;
	int c, failed = 0;

	while ((c = getopt(argc, argv, "d:s:b:q:p:o:kvh")) != -1) {
		switch (c) {
		case 'd':
			b.dir = optarg;
			break;
		case 's':
		case 'b':
			if (fg_parse_size(optarg, c == 's' ? &b.size : &b.block, why,
					  sizeof(why))) {
				fprintf(stderr, "disk_bench: -%c %s: %s\n", c, optarg, why);
				return 2;
			}
			break;
		case 'q':
			if (fg_parse_int(optarg, 1, MAX_INFLIGHT, &q, why, sizeof(why))) {
				fprintf(stderr, "disk_bench: -q %s: %s\n", optarg, why);
				return 2;
			}
			b.inflight = (unsigned)q;
			break;
		case 'p':
			snprintf(plugins, sizeof(plugins), "%s", optarg);
			break;
		case 'o':
			if (!strchr(optarg, '=') || strchr(optarg, '=') == optarg ||
			    b.nsettings == MAX_SETTINGS)
				return usage();
			b.settings[b.nsettings++] = optarg;
			break;
		case 'k':
			keep = true;
			break;
		case 'v':
			fg_set_log_level(FG_LOG_DEBUG);
			break;
		default:
			return usage();
		}
	}
	if (optind != argc || !b.size || b.block < 4096 || b.block % 4096 || b.block > (1u << 30))
		return usage();
	if ((size_t)b.inflight * b.block > ((size_t)4 << 30)) {
		fprintf(stderr, "disk_bench: %u requests of %" PRIu64 " bytes need too much "
			"memory\n", b.inflight, b.block);
		return 2;
	}
	snprintf(b.file, sizeof(b.file), "%s/fgcore-disk-bench.dat", b.dir);
	if (posix_memalign((void **)&b.bufs, 4096, (size_t)b.inflight * b.block)) {
		fprintf(stderr, "disk_bench: out of memory\n");
		return 1;
	}
	/* Not zeros: nothing on the way may shortcut them. */
	for (size_t i = 0; i < (size_t)b.inflight * b.block; i++)
		b.bufs[i] = (unsigned char)(i * 131 + 7);

	printf("disk_bench: %s in %s, requests of %s, %u in flight, O_DIRECT\n",
	       fg_format_size(b.size, sz, sizeof(sz)), b.file, fg_format_size(b.block, why,
	       sizeof(why)), b.inflight);
	printf("%-16s %10s %10s\n", "plugin", "write GB/s", "read GB/s");
	for (char *save = NULL, *name = strtok_r(plugins, ",", &save); name;
	     name = strtok_r(NULL, ",", &save))
		failed |= run_plugin(&b, name, keep) != 0;
	printf("compare: dd if=%s of=/dev/null bs=4M iflag=direct%s\n", b.file,
	       keep ? "" : "   (run with -k to keep the file)");
	if (!keep)
		unlink(b.file);
	free(b.bufs);
	return failed ? 1 : 0;
}
