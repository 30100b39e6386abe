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

/* Number of CUDA devices the core found (fg_host.gpu_count); 0 until set. */
void fg_core_host_set_gpu_count(int n);

/* Record an error line from core code: FG_ERR("%s:%d: ...", file, line). */
#define FG_ERR(...) fg_error(fg_core_host(), __VA_ARGS__)
#define FG_LOG(level, ...) fg_log(fg_core_host(), (level), __VA_ARGS__)

#endif
