/* core/optimizer/bench_predict.h - `fgcore bench --predict`: the cost
 * model's prediction for the engine's policy beside bench's measurement. */
#ifndef FG_OPTIMIZER_BENCH_PREDICT_H
#define FG_OPTIMIZER_BENCH_PREDICT_H

#include <stdio.h>

#include "core/optimizer/cost_model.h"

struct fg_config;
struct fg_engine;
struct fg_bench_params;
struct fg_bench_result;

/* The case of an open engine: its model, policy-independent hardware from
 * [hardware], capacities, activation size and tier kinds from the engine. */
int fg_cost_case_of_engine(const struct fg_config *cfg, const struct fg_engine *e,
			   int64_t prompt_len, int64_t gen_len, struct fg_cost_case *cc);

/* Print the prediction beside the measurement r (NULL: prediction only).
 * Without [hardware] rates it prints one line saying to run `fgcore profile`. */
void fg_cost_print_prediction(FILE *out, const struct fg_config *cfg, const struct fg_engine *e,
			      const struct fg_bench_params *p, const struct fg_bench_result *r);

/* `fgcore bench --predict-only`: the configured policy priced on [hardware]
 * without loading the model or running (capacities: [hardware]'s, capped by
 * the tiers' `capacity`); prints the prediction and whether the plan fits.
 * 0: it fits; 1: it does not; < 0: cannot price it (a line says why). */
int fg_cost_print_config(FILE *out, const struct fg_config *cfg);

#endif
