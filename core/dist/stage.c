/* core/dist/stage.c - the layers and the policy share of each stage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/stage.h"
#include "core/util/error.h"

void fg_stage_whole(int64_t layers, struct fg_stage *out)
{
	*out = (struct fg_stage){ .rank = 0, .size = 1, .layer0 = 0, .nlayers = layers };
}

int fg_stage_split(const char *spec, int64_t layers, int size, int rank, struct fg_stage *out)
{
	int64_t start = 0, sum = 0;
	const char *p = spec;
	int n = 0;

	out->rank = rank;
	out->size = size;
	if (!*spec) {
		if (layers < size) {
			FG_ERR("[distributed]: %d stages need at least one layer each, and the model has %lld: run fewer ranks",
			       size, (long long)layers);
			return -EINVAL;
		}
		/* Earlier stages take the extra layers: the last also runs the output block. */
		int64_t base = layers / size, extra = layers % size;
		out->layer0 = rank * base + (rank < extra ? rank : extra);
		out->nlayers = base + (rank < extra);
		return 0;
	}
	while (*p) {
		char *end;
		long long v = strtoll(p, &end, 10);
		if (end == p || v < 1 || v > layers) {
			FG_ERR("[distributed] layers \"%s\": expected positive integers separated by commas, one per rank",
			       spec);
			return -EINVAL;
		}
		if (n == rank) {
			start = sum;
			out->nlayers = v;
		}
		sum += v;
		n++;
		p = end;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == ',')
			p++;
		else if (*p) {
			FG_ERR("[distributed] layers \"%s\": expected positive integers separated by commas",
			       spec);
			return -EINVAL;
		}
	}
	if (n != size || sum != layers) {
		FG_ERR("[distributed] layers \"%s\": %d stages of %lld layers in all, but the job has %d ranks and the model %lld layers: give one count per rank, adding up to %lld",
		       spec, n, (long long)sum, size, (long long)layers, (long long)layers);
		return -EINVAL;
	}
	out->layer0 = start;
	return 0;
}

int fg_stage_percent(const char *spec, int size, int rank, char *out, size_t n)
{
	const char *p = spec;
	int i = 0;

	out[0] = '\0';
	if (!*spec)
		return 0;
	for (;; i++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (i == rank)
			snprintf(out, n, "%.*s", (int)len, p);
		if (!bar)
			break;
		p = bar + 1;
	}
	if (i + 1 != size) {
		FG_ERR("[distributed] percent \"%s\": %d stages, but the job has %d ranks: give six integers per rank, stages separated by |",
		       spec, i + 1, size);
		return -EINVAL;
	}
	return 0;
}
