/* cli/batch_progress.c - run-batch's progress display (see batch_progress.h). */
#include <stdio.h>
#include <unistd.h>

#include "cli/batch_progress.h"
#include "core/util/clock.h"

void fg_progress_start(struct fg_progress *p, int quiet, double interval, size_t total)
{
	p->mode = quiet ? 0 : isatty(STDERR_FILENO) ? 1 : 2;
	p->start = p->last = fg_now();
	p->interval = interval > 0 ? interval : 10;
	p->total = total;
	p->kept = 0;
}

static void duration(char *buf, size_t len, double s)
{
	long t = (long)(s + 0.5);

	if (t >= 3600)
		snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
	else if (t >= 60)
		snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, len, "%lds", t);
}

void fg_progress_update(struct fg_progress *p, size_t done, uint64_t tokens)
{
	double now = fg_now(), el = now - p->start;
	char eta[32] = "?", tot[32] = "?";
	size_t ran = done > p->kept ? done - p->kept : 0;

	if (!p->mode || now - p->last < (p->mode == 1 ? 0.2 : p->interval))
		return;
	p->last = now;
	if (p->total)
		snprintf(tot, sizeof(tot), "%zu", p->total);
	if (p->total && ran && done <= p->total)
		duration(eta, sizeof(eta), (double)(p->total - done) * el / (double)ran);
	if (p->mode == 1) {
		char bar[31];
		size_t fill = p->total ? done * 30 / p->total : 0;
		for (size_t i = 0; i < 30; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[30] = '\0';
		fprintf(stderr, "\r[%s] %zu/%s lines  %.1f tokens/s  ETA %s\033[K", bar, done, tot,
			el > 0 ? (double)tokens / el : 0.0, eta);
	} else {
		fprintf(stderr, "fgcore: run-batch: %zu/%s lines done, %.1f tokens/s, ETA %s\n", done,
			tot, el > 0 ? (double)tokens / el : 0.0, eta);
	}
	fflush(stderr);
}

void fg_progress_end(struct fg_progress *p)
{
	if (p->mode == 1) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}
