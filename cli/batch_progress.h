/* cli/batch_progress.h - how far a run-batch job is, on standard error: a
 * bar redrawn in place on a terminal (lines done/total, tokens/s, ETA), a
 * plain line every `interval` seconds otherwise (a log file).
 *
 * The ETA counts work, not lines: token positions (each request's prompt
 * plus its budget), since length buckets run the short requests of a
 * window first.  Lines not read yet are priced at the average work of a
 * line read so far. */
#ifndef FG_CLI_BATCH_PROGRESS_H
#define FG_CLI_BATCH_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

struct fg_progress {
	int mode;         /* 0: silent, 1: a bar, 2: lines */
	double start, last, interval;
	size_t total;     /* input lines; 0: not known (a pipe) */
	size_t kept;      /* lines an earlier run finished */
	size_t read;      /* lines read, through the window running */
	uint64_t work_before;          /* work of the windows before it */
	uint64_t work_done, work_total; /* the running window's */
	uint64_t prompt, generated;    /* tokens this run scored and generated */
};

/* quiet: nothing; else a bar when stderr is a terminal, lines every
 * interval seconds when it is not. */
void fg_progress_start(struct fg_progress *p, int quiet, double interval, size_t total);
/* A window starts running: `read` lines read in all, with it. */
void fg_progress_window(struct fg_progress *p, size_t read);
/* After a batch: prompt, generated: tokens of this run; work_done of
 * work_total: the running window's. */
void fg_progress_work(struct fg_progress *p, uint64_t prompt, uint64_t generated,
		      uint64_t work_done, uint64_t work_total);
/* done: lines finished (kept ones included).  Draws at most 5 times a
 * second (a bar) or once an interval (lines). */
void fg_progress_update(struct fg_progress *p, size_t done);
/* Clear the bar, so that the next line starts clean. */
void fg_progress_end(struct fg_progress *p);

#endif
