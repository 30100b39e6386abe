/* core/exec/devtime.h - a step's time on the device's clock (opt-in:
 * fg_forward_env.device_timing).  Marks go on the compute stream at each
 * phase's end; at the step's end the span between consecutive marks is added
 * to the phase that ended at the later one.  The compute stream's timeline is
 * thus cut into what it waited for (weights, cache, activations, the host's
 * attention) and what it ran (compute, the logits copy), which add up to the
 * step's device time; the issuing thread's clock cannot tell them apart when
 * the work is asynchronous. */
#ifndef FG_EXEC_DEVTIME_H
#define FG_EXEC_DEVTIME_H

struct fg_forward;

enum fg_dev_phase {
	FG_DEV_COMPUTE,
	FG_DEV_WAIT_WEIGHT,
	FG_DEV_WAIT_CACHE,
	FG_DEV_WAIT_HIDDEN,
	FG_DEV_HOST_ATTN,
	FG_DEV_LOGITS,
	FG_DEV_PHASES
};

/* The span since the previous mark was `ended`; the step's first mark starts it. */
int fg_devtime_mark(struct fg_forward *f, enum fg_dev_phase ended);
/* After the step's work is done: add its spans to the stats, start afresh. */
int fg_devtime_collect(struct fg_forward *f);
void fg_devtime_free(struct fg_forward *f);

#endif
