/* tests/gpu_common.h - shared by the GPU plugin tests: find out, without
 * touching CUDA in the calling process, whether the GPU plugins can run here,
 * and a small PRNG.
 *
 * CUDA state does not survive fork(), and Check forks every test from the
 * parent: the parent must never initialise CUDA.  So the probe runs in a
 * child of its own. */
#ifndef FG_TESTS_GPU_COMMON_H
#define FG_TESTS_GPU_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

/* 0: every named plugin loads and its probe says usable; 77: skip (message
 * printed); 1: a plugin of a CUDA build failed to load (message printed). */
static inline int gpu_plugins_usable(const char *const *names, const uint32_t *kinds, int n)
{
#ifndef HAVE_CUDA
	(void)names;
	(void)kinds;
	(void)n;
	printf("SKIP: built without CUDA: no cuda_mem/cublas plugins to test\n");
	return 77;
#else
	int pipefd[2], status = 0;
	char msg[512] = "";
	ssize_t got;
	pid_t pid;

	if (pipe(pipefd) != 0) {
		perror("pipe");
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		int code = 0;

		close(pipefd[0]);
		for (int i = 0; i < n && !code; i++) {
			struct fg_plugin_handle h;
			int rc = fg_plugin_load(names[i], kinds[i], &h);

			if (rc) {
				snprintf(msg, sizeof(msg), "cannot load plugin %s: %s", names[i],
					 fg_last_error());
				code = 1;
			} else {
				if (fg_plugin_probe(&h) <= 0) {
					snprintf(msg, sizeof(msg), "plugin %s: no usable CUDA device "
						 "here (probe)", names[i]);
					code = 77;
				}
				fg_plugin_close(&h);
			}
		}
		if (write(pipefd[1], msg, strlen(msg)) < 0)
			code = 1;
		_exit(code);
	}
	close(pipefd[1]);
	got = read(pipefd[0], msg, sizeof(msg) - 1);
	msg[got > 0 ? got : 0] = 0;
	close(pipefd[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
		printf("FAIL: the probe process crashed (status %d)\n", status);
		return 1;
	}
	if (WEXITSTATUS(status) == 77) {
		printf("SKIP: %s\n", msg);
		return 77;
	}
	if (WEXITSTATUS(status) != 0) {
		printf("FAIL: %s\n", msg);
		return 1;
	}
	return 0;
#endif
}

/* xorshift64*: reproducible inputs (FGCORE_TEST_SEED overrides the seed). */
static uint64_t gpu_rng = 0x9e3779b97f4a7c15ull;

static inline void gpu_seed(uint64_t s)
{
	const char *env = getenv("FGCORE_TEST_SEED");

	if (env && *env)
		s ^= strtoull(env, NULL, 0);
	gpu_rng = s ? s : 1;
}

static inline uint64_t gpu_next(void)
{
	gpu_rng ^= gpu_rng >> 12;
	gpu_rng ^= gpu_rng << 25;
	gpu_rng ^= gpu_rng >> 27;
	return gpu_rng * 0x2545f4914f6cdd1dull;
}

/* Uniform in [lo, hi). */
static inline float gpu_uniform(float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(gpu_next() >> 11) / 9007199254740992.0);
}

#endif
