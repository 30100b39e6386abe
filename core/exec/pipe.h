/* core/exec/pipe.h - the messages of a pipeline job between rank 0 and
 * the other stages (core/exec/pipe.c): agreeing at open, and the commands
 * a later stage's worker loop (core/engine/worker.c) follows.  The
 * schedule's side of a stage is in forward_int.h. */
#ifndef FG_EXEC_PIPE_H
#define FG_EXEC_PIPE_H

#include <stdint.h>

struct fg_dist;
struct fg_forward;

/* At open: this rank's outcome and its configuration's fingerprint (lines
 * "key value") against every other rank's of the job; 0 when all agree,
 * else rank 0 returns the first difference or failure with a line naming
 * the rank, the others -ECANCELED (rank 0 reports it). */
int fg_pipe_agree_config(struct fg_dist *d, int rc, const char *fingerprint);
/* The same for an outcome only: among every rank of the job, or among the
 * stages of this rank's replica (stage 0 deciding). */
int fg_pipe_agree_all(struct fg_dist *d, int rc);
int fg_pipe_agree(struct fg_dist *d, int rc);
/* Rank 0 closing its engine: the other ranks' worker loops end. */
int fg_pipe_close(struct fg_dist *d);

/* What rank 0 tells the other stages to do. */
enum { FG_PIPE_NEW = 1, FG_PIPE_PREFILL, FG_PIPE_DECODE, FG_PIPE_FREE, FG_PIPE_EXIT,
       FG_PIPE_JOIN };
struct fg_pipe_cmd {
	int32_t op, want;
	int32_t score_k;            /* FG_PIPE_PREFILL, scored: the tops per position */
	int32_t share_levels;       /* FG_PIPE_PREFILL: shared prefixes' levels (0: none), */
	int64_t share_split[4];     /* their splits (the sources follow the paddings) */
	int64_t nb, bs, plen, glen; /* FG_PIPE_NEW: the run's shape */
	int64_t live_rows;          /* FG_PIPE_DECODE: rank 0's live rows follow (nb * bs bytes) */
	int64_t join_n;             /* FG_PIPE_JOIN: the prompt columns (the rows, pads follow) */
};

/* Ranks other than 0: wait (without limit) for rank 0's next command. */
void fg_pipe_next_command(struct fg_dist *d, struct fg_pipe_cmd *c);
/* Make a prefill, decode or join step rank 0 asked for on this stage's run
 * f (pad: room for its nb * bs paddings).  A failure ends the job. */
void fg_pipe_follow_step(struct fg_dist *d, struct fg_forward *f, const struct fg_pipe_cmd *c,
			 int32_t *pad);
/* One line naming this rank (fg_last_error's), then every rank stops. */
void fg_pipe_die(struct fg_dist *d);

#endif
