/* core/engine/pipeline.h - an engine as one stage of a pipeline job
 * (core/engine/pipeline.c); the schedule's side is in forward_int.h. */
#ifndef FG_ENGINE_PIPELINE_H
#define FG_ENGINE_PIPELINE_H

struct fg_dist;
struct fg_engine;

/* At open: this rank's outcome and its configuration's fingerprint (lines
 * "key value") against every other rank's; 0 when all agree, else rank 0
 * returns the first difference or failure with a line naming the rank, the
 * others -ECANCELED (rank 0 reports it). */
int fg_pipe_agree_config(struct fg_dist *d, int rc, const char *fingerprint);
/* The same for an outcome only. */
int fg_pipe_agree(struct fg_dist *d, int rc);
/* Rank 0 closing its engine: the other ranks' worker loops end. */
int fg_pipe_close(struct fg_dist *d);
/* Ranks other than 0: follow rank 0's runs until it closes its engine. */
int fg_pipe_worker(struct fg_engine *e);

#endif
