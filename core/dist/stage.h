/* core/dist/stage.h - which layers a pipeline stage holds. */
#ifndef FG_DIST_STAGE_H
#define FG_DIST_STAGE_H

#include <stddef.h>
#include <stdint.h>

/* Rank `rank` of `size` holds layers [layer0, layer0 + nlayers); the first
 * stage also holds the input block, the last one the output block. */
struct fg_stage {
	int rank, size;
	int64_t layer0, nlayers;
};

static inline int fg_stage_first(const struct fg_stage *s) { return s->rank == 0; }
static inline int fg_stage_last(const struct fg_stage *s) { return s->rank == s->size - 1; }

/* The whole model in one process. */
void fg_stage_whole(int64_t layers, struct fg_stage *out);
/* The stage of `rank` from [distributed] layers (`spec`, "" for an even split);
 * -EINVAL with a line when spec does not fit `layers` and `size` ranks. */
int fg_stage_split(const char *spec, int64_t layers, int size, int rank, struct fg_stage *out);
/* The rank's part of [distributed] percent (stages separated by '|') into out;
 * "" when spec is empty; -EINVAL with a line when it has not one per rank. */
int fg_stage_percent(const char *spec, int size, int rank, char *out, size_t n);

#endif
