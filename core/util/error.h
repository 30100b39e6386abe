/* core/util/error.h - the core's fg_host: last error text (per thread) and logging. */
#ifndef FG_UTIL_ERROR_H
#define FG_UTIL_ERROR_H

#include <fgcore/plugin.h>

/* The host table the core passes to every plugin. */
const struct fg_host *fg_core_host(void);

/* Last error recorded on this thread by the core or a plugin (never NULL). */
const char *fg_last_error(void);
void fg_clear_error(void);

/* Log threshold: FG_LOG_ERROR .. FG_LOG_DEBUG (default FG_LOG_WARN). */
void fg_set_log_level(int level);
int fg_log_level(void);

/* fg_host.gpu_count: the NVIDIA GPUs of the machine, counted once on the
 * first fg_core_host() from fg_gpu_count_scan("/proc/driver/nvidia/gpus",
 * "/dev", $CUDA_VISIBLE_DEVICES).  The setter overrides it (tests). */
void fg_core_host_set_gpu_count(int n);

/* GPUs seen: entries of proc_dir (one per GPU the driver drives) or, when
 * proc_dir cannot be opened, nodes nvidiaN in dev_dir; limited by visible
 * (CUDA_VISIBLE_DEVICES, NULL: unset) as CUDA limits them.  0 on error.
 * Internal, taking its sources as arguments for tests. */
int fg_gpu_count_scan(const char *proc_dir, const char *dev_dir, const char *visible);

/* Record an error line from core code: FG_ERR("%s:%d: ...", file, line). */
#define FG_ERR(...) fg_error(fg_core_host(), __VA_ARGS__)
#define FG_LOG(level, ...) fg_log(fg_core_host(), (level), __VA_ARGS__)

#endif
