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
	p->read = 0;
	p->work_before = p->work_done = p->work_total = 0;
	p->prompt = p->generated = 0;
}

void fg_progress_window(struct fg_progress *p, size_t read)
{
	p->work_before += p->work_done;
	p->work_done = p->work_total = 0;
	p->read = read;
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

/* Seconds left: the work left in the window, and the lines not read yet
 * at the average work of a line read so far, at the rate of the work done;
 * < 0: not known. */
static double seconds_left(const struct fg_progress *p, double el)
{
	uint64_t done = p->work_before + p->work_done, seen = p->work_before + p->work_total;
	double left = (double)(p->work_total - p->work_done);

	if (!done || !p->read)
		return -1;
	if (p->total > p->read)
		left += (double)(p->total - p->read) * (double)seen / (double)p->read;
	else if (!p->total)
		return -1;
	return left * el / (double)done;
}

void fg_progress_work(struct fg_progress *p, uint64_t prompt, uint64_t generated,
		      uint64_t work_done, uint64_t work_total)
{
	p->work_done = work_done;
	p->work_total = work_total;
	p->prompt = prompt;
	p->generated = generated;
}

void fg_progress_update(struct fg_progress *p, size_t done)
{
	double now = fg_now(), el = now - p->start, left;
	char eta[32] = "?", tot[32] = "?";
	/* A scoring job generates nothing: its rate is prompt tokens scored. */
	const char *what = p->generated ? "tokens/s" : "prompt tokens/s";
	uint64_t tokens = p->generated ? p->generated : p->prompt;

	if (!p->mode || now - p->last < (p->mode == 1 ? 0.2 : p->interval))
		return;
	p->last = now;
	if (p->total)
		snprintf(tot, sizeof(tot), "%zu", p->total);
	if ((left = seconds_left(p, el)) >= 0)
		duration(eta, sizeof(eta), left);
	if (p->mode == 1) {
		char bar[31];
		size_t fill = p->total ? done * 30 / p->total : 0;
		for (size_t i = 0; i < 30; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[30] = '\0';
		fprintf(stderr, "\r[%s] %zu/%s lines  %.1f %s  ETA %s\033[K", bar, done, tot,
			el > 0 ? (double)tokens / el : 0.0, what, eta);
	} else {
		fprintf(stderr, "fgcore: run-batch: %zu/%s lines done, %.1f %s, ETA %s\n", done,
			tot, el > 0 ? (double)tokens / el : 0.0, what, eta);
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
