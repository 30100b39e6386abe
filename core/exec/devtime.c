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
	if (f->dt.n == f->dt.cap) {
		/* Timers are reused from step to step; a step needs a few per item. */
		int cap = f->dt.cap ? 2 * f->dt.cap : 64;
		void **t = realloc(f->dt.timer, sizeof(*t) * (size_t)cap);
		enum fg_dev_phase *p = t ? realloc(f->dt.phase, sizeof(*p) * (size_t)cap) : NULL;
		if (t)
			f->dt.timer = t;
		if (!t || !p) {
			FG_ERR("device timing: out of memory for %d marks", cap);
			return -ENOMEM;
		}
		f->dt.phase = p;
		for (int i = f->dt.cap; i < cap; i++)
			f->dt.timer[i] = NULL;
		f->dt.cap = cap;
	}
	if (!f->dt.timer[f->dt.n] && (rc = fg_backend_timer_create(f->be, &f->dt.timer[f->dt.n]))) {
		if (rc == -ENOTSUP)
			FG_ERR("device timing: compute plugin %s has no timers (compute ABI 1.2): turn [bench] device_timing off",
			       f->be->ph.plugin->name);
		return rc;
	}
	if ((rc = fg_backend_timer_record(f->be, f->dt.timer[f->dt.n], f->stream)))
		return rc;
	f->dt.phase[f->dt.n++] = ended;
	return 0;
}

int fg_devtime_collect(struct fg_forward *f)
{
	int rc = 0;

	for (int i = 1; i < f->dt.n && !rc; i++) {
		double s = 0;
		if (!(rc = fg_backend_timer_elapsed(f->be, f->dt.timer[i - 1], f->dt.timer[i], &s)))
			f->stats.dev_s[f->dt.phase[i]] += s;
	}
	f->dt.n = 0;
	return rc;
}

void fg_devtime_free(struct fg_forward *f)
{
	for (int i = 0; i < f->dt.cap; i++)
		fg_backend_timer_destroy(f->be, f->dt.timer[i]);
	free(f->dt.timer);
	free(f->dt.phase);
}
