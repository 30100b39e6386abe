/* core/exec/devtime.c - a step's device time by phase (see devtime.h). */
#include <errno.h>
#include <stdlib.h>

#include "core/exec/devtime.h"
#include "core/exec/forward_int.h"
#include "core/util/error.h"

int fg_devtime_mark(struct fg_forward *f, enum fg_dev_phase ended)
{
	int rc;

	if (!f->env.device_timing)
		return 0;
	if (f->dt_n == f->dt_cap) {
		/* Timers are reused from step to step; a step needs a few per item. */
		int cap = f->dt_cap ? 2 * f->dt_cap : 64;
		void **t = realloc(f->dt_timer, sizeof(*t) * (size_t)cap);
		enum fg_dev_phase *p = t ? realloc(f->dt_phase, sizeof(*p) * (size_t)cap) : NULL;
		if (t)
			f->dt_timer = t;
		if (!t || !p) {
			FG_ERR("device timing: out of memory for %d marks", cap);
			return -ENOMEM;
		}
		f->dt_phase = p;
		for (int i = f->dt_cap; i < cap; i++)
			f->dt_timer[i] = NULL;
		f->dt_cap = cap;
	}
	if (!f->dt_timer[f->dt_n] && (rc = fg_backend_timer_create(f->be, &f->dt_timer[f->dt_n]))) {
		if (rc == -ENOTSUP)
			FG_ERR("device timing: compute plugin %s has no timers (compute ABI 1.2): turn [bench] device_timing off",
			       f->be->ph.plugin->name);
		return rc;
	}
	if ((rc = fg_backend_timer_record(f->be, f->dt_timer[f->dt_n], f->stream)))
		return rc;
	f->dt_phase[f->dt_n++] = ended;
	return 0;
}

int fg_devtime_collect(struct fg_forward *f)
{
	int rc = 0;

	for (int i = 1; i < f->dt_n && !rc; i++) {
		double s = 0;
		if (!(rc = fg_backend_timer_elapsed(f->be, f->dt_timer[i - 1], f->dt_timer[i], &s)))
			f->stats.dev_s[f->dt_phase[i]] += s;
	}
	f->dt_n = 0;
	return rc;
}

void fg_devtime_free(struct fg_forward *f)
{
	for (int i = 0; i < f->dt_cap; i++)
		fg_backend_timer_destroy(f->be, f->dt_timer[i]);
	free(f->dt_timer);
	free(f->dt_phase);
}
