/* core/util/error.c - the core's fg_host: per-thread last error line, logging
 * and the number of GPUs the machine shows. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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
	.abi_version	= FG_ABI_VERSION, /* the part every kind shares (fgcore/plugin.h) */
	.error		= fg_host_error,
	.log		= fg_host_log,
	.gpu_count	= 0,
	.priv		= NULL,
};

/* Entries of dir that do not start with '.' and, when prefix is set, are
 * prefix followed by digits only; -1 when dir cannot be opened. */
static int fg_count_entries(const char *dir, const char *prefix)
{
	size_t np = prefix ? strlen(prefix) : 0;
	struct dirent *d;
	DIR *dp = opendir(dir);
	int n = 0;

	if (!dp)
		return -1;
	while ((d = readdir(dp))) {
		const char *s = d->d_name;
		if (s[0] == '.')
			continue;
		if (prefix) {
			if (strncmp(s, prefix, np) || !s[np] || strspn(s + np, "0123456789") != strlen(s + np))
				continue;
		}
		n++;
	}
	closedir(dp);
	return n;
}

/* How many of n devices a CUDA_VISIBLE_DEVICES value leaves visible.  CUDA
 * reads the comma-separated list up to its first invalid entry: an index out
 * of range, a negative or malformed one (so "" and "-1" hide every device).
 * A repeated index is taken as invalid too, to never count a device twice;
 * a UUID ("GPU-..." or "MIG-...") cannot be checked without the driver and
 * counts as one device. */
static int fg_visible_count(const char *visible, int n)
{
	char seen[256] = { 0 };
	int count = 0;

	for (const char *p = visible;; p++) {
		const char *end = p + strcspn(p, ",");
		char tok[128];
		size_t len;

		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		len = (size_t)(end - p);
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (!len || len >= sizeof(tok))
			break;
		memcpy(tok, p, len);
		tok[len] = '\0';
		if (tok[0] >= '0' && tok[0] <= '9') {
			char *e;
			errno = 0;
			long i = strtol(tok, &e, 10);
			if (errno || *e || i >= n || i >= (long)sizeof(seen) || seen[i])
				break;
			seen[i] = 1;
		} else if (strncmp(tok, "GPU-", 4) && strncmp(tok, "MIG-", 4)) {
			break;
		}
		count++;
		if (!*end)
			break;
		p = end;
	}
	return count < n ? count : n;
}

int fg_gpu_count_scan(const char *proc_dir, const char *dev_dir, const char *visible)
{
	/* The driver's list of the GPUs it drives, else the device nodes
	 * (a container may show only the nodes it was given). */
	int n = proc_dir ? fg_count_entries(proc_dir, NULL) : -1;
	if (n < 0)
		n = dev_dir ? fg_count_entries(dev_dir, "nvidia") : -1;
	if (n <= 0)
		return 0;
	return visible ? fg_visible_count(visible, n) : n;
}

static pthread_once_t fg_gpu_once = PTHREAD_ONCE_INIT;

/* Once, on the first use of the host table: no CUDA header or library is
 * needed to know how many devices a CUDA plugin would see. */
static void fg_gpu_count_init(void)
{
	fg_host_table.gpu_count =
		fg_gpu_count_scan("/proc/driver/nvidia/gpus", "/dev", getenv("CUDA_VISIBLE_DEVICES"));
}

const struct fg_host *fg_core_host(void)
{
	pthread_once(&fg_gpu_once, fg_gpu_count_init);
	return &fg_host_table;
}

void fg_core_host_set_gpu_count(int n)
{
	pthread_once(&fg_gpu_once, fg_gpu_count_init);
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
