/* core/util/error.c - the core's fg_host: per-thread last error line and logging. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "core/util/error.h"

#define FG_ERROR_MAX 1024

static _Thread_local char fg_error_text[FG_ERROR_MAX];
static _Atomic int fg_log_threshold = FG_LOG_WARN;

static const char *const fg_level_names[] = { "error", "warn", "info", "debug" };

/* Keep a message on one line: newlines and other control characters in the
 * middle become spaces, trailing ones go. */
static void fg_one_line(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 && s[i] != '\t')
			s[i] = ' ';
}

static void fg_host_error(const struct fg_host *host, const char *fmt, ...)
{
	/* Format into a scratch buffer first: callers often pass
	 * fg_last_error() itself as an argument when adding context. */
	char tmp[FG_ERROR_MAX];
	va_list ap;

	(void)host;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	fg_one_line(tmp);
	memcpy(fg_error_text, tmp, sizeof(tmp));
}

static void fg_host_log(const struct fg_host *host, int level, const char *fmt, ...)
{
	char tmp[FG_ERROR_MAX];
	va_list ap;

	(void)host;
	if (level > atomic_load(&fg_log_threshold))
		return;
	if (level < FG_LOG_ERROR)
		level = FG_LOG_ERROR;
	if (level > FG_LOG_DEBUG)
		level = FG_LOG_DEBUG;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	fg_one_line(tmp);
	/* One fprintf call per line so that lines of threads do not interleave. */
	fprintf(stderr, "fgcore: %s: %s\n", fg_level_names[level], tmp);
}

static struct fg_host fg_host_table = {
	.abi_version	= FG_ABI_VERSION,
	.error		= fg_host_error,
	.log		= fg_host_log,
	.gpu_count	= 0,
	.priv		= NULL,
};

const struct fg_host *fg_core_host(void)
{
	return &fg_host_table;
}

void fg_core_host_set_gpu_count(int n)
{
	fg_host_table.gpu_count = n < 0 ? 0 : n;
}

const char *fg_last_error(void)
{
	return fg_error_text;
}

const char *fg_last_error_text(void)
{
	return fg_error_text;
}

void fg_clear_error(void)
{
	fg_error_text[0] = '\0';
}

void fg_set_log_level(int level)
{
	if (level < FG_LOG_ERROR)
		level = FG_LOG_ERROR;
	if (level > FG_LOG_DEBUG)
		level = FG_LOG_DEBUG;
	atomic_store(&fg_log_threshold, level);
}

int fg_log_level(void)
{
	return atomic_load(&fg_log_threshold);
}
