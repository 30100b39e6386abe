/* cli/batch_journal.c - run-batch's journal (see batch_journal.h). */
#define _GNU_SOURCE /* getline */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/batch_journal.h"
#include "core/util/clock.h"

#define MAGIC "fgcore-run-batch-journal 1 "

struct fg_journal {
	char *path;
	FILE *r;          /* the earlier records, read up to `end` */
	off_t end;        /* where the valid earlier records end */
	FILE *w;          /* appends */
	char *buf;        /* the record read ahead */
	size_t bcap;
	ssize_t blen;     /* -1: nothing read ahead */
	size_t line;
	uint64_t hash;
	size_t rec_at;    /* where the record starts in buf */
	double synced;    /* when it was last synced */
	size_t appended;
	long enospc_after; /* test hook; -1: off */
};

uint64_t fg_hash(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* A journal line "<line> <hash> <record>\n": 1 with its fields, 0 when it
 * is not one (torn or damaged). */
static int parse_record(const char *s, size_t len, size_t *line, uint64_t *hash, size_t *rec_at)
{
	unsigned long long l, h;
	int n = 0;

	if (len < 2 || s[len - 1] != '\n')
		return 0;
	if (sscanf(s, "%llu %16llx %n", &l, &h, &n) != 2 || n == 0 || l == 0 || (size_t)n >= len - 1)
		return 0;
	*line = (size_t)l;
	*hash = h;
	*rec_at = (size_t)n;
	return 1;
}

static int is_json(const char *s, size_t len)
{
	json_error_t e;
	json_t *v = json_loadb(s, len, 0, &e);
	int ok = json_is_object(v);

	json_decref(v);
	return ok;
}

int fg_journal_open(struct fg_journal **out, const char *path, uint64_t fingerprint,
		    size_t *kept, char *err, size_t errlen)
{
	struct fg_journal *j = calloc(1, sizeof(*j));
	char head[sizeof(MAGIC) + 32];
	const char *hook = getenv("FGCORE_TEST_RUN_BATCH_ENOSPC");
	struct stat st;
	FILE *scan = NULL;
	int fd = -1, rc = 1;
	off_t at;

	*out = NULL;
	*kept = 0;
	if (!j || !(j->path = strdup(path))) {
		snprintf(err, errlen, "out of memory");
		free(j);
		return 1;
	}
	j->blen = -1;
	j->enospc_after = hook && *hook ? strtol(hook, NULL, 10) : -1;
	snprintf(head, sizeof(head), MAGIC "%016" PRIx64 "\n", fingerprint);
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0666);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open the journal %s: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "the journal %s is not a regular file", path);
		rc = 2;
		goto fail;
	}
	if (st.st_size == 0) {
		/* A new job: its header, on the disk before any record. */
		if (write(fd, head, strlen(head)) != (ssize_t)strlen(head) || fsync(fd) != 0) {
			snprintf(err, errlen, "cannot write the journal %s: %s", path,
				 strerror(errno ? errno : EIO));
			goto fail;
		}
		at = (off_t)strlen(head);
	} else {
		char *line = NULL;
		size_t cap = 0, l, ra;
		uint64_t h;
		ssize_t n;

		scan = fdopen(dup(fd), "r");
		if (!scan) {
			snprintf(err, errlen, "cannot read the journal %s: %s", path, strerror(errno));
			goto fail;
		}
		n = getline(&line, &cap, scan);
		if (n < (ssize_t)strlen(MAGIC) || strncmp(line, MAGIC, strlen(MAGIC))) {
			snprintf(err, errlen, "%s is not a run-batch journal: remove it or give another --journal",
				 path);
			free(line);
			rc = 2;
			goto fail;
		}
		if (strcmp(line, head)) {
			snprintf(err, errlen, "the journal %s is another job's (its configuration or --window differ): give the same settings to resume it, or remove it to start over",
				 path);
			free(line);
			rc = 2;
			goto fail;
		}
		at = (off_t)n;
		/* The valid records; the first torn or damaged line ends them. */
		while ((n = getline(&line, &cap, scan)) > 0 &&
		       parse_record(line, (size_t)n, &l, &h, &ra) &&
		       is_json(line + ra, (size_t)n - ra - 1)) {
			at += n;
			(*kept)++;
		}
		free(line);
		if (ferror(scan)) {
			snprintf(err, errlen, "reading the journal %s failed: %s", path, strerror(errno));
			goto fail;
		}
		if (at < st.st_size && ftruncate(fd, at) != 0) {
			snprintf(err, errlen, "cannot cut the torn end of the journal %s: %s", path,
				 strerror(errno));
			goto fail;
		}
		fclose(scan);
		scan = NULL;
	}
	j->end = at;
	j->r = fopen(path, "re");
	if (!j->r || fseeko(j->r, (off_t)strlen(head), SEEK_SET) != 0) {
		snprintf(err, errlen, "cannot read the journal %s: %s", path, strerror(errno));
		goto fail;
	}
	if (lseek(fd, 0, SEEK_END) < 0 || !(j->w = fdopen(fd, "a"))) {
		snprintf(err, errlen, "cannot append to the journal %s: %s", path, strerror(errno));
		goto fail;
	}
	j->synced = fg_now();
	*out = j;
	return 0;
fail:
	if (scan)
		fclose(scan);
	if (fd >= 0 && !j->w)
		close(fd);
	fg_journal_close(j);
	return rc;
}

int fg_journal_next(struct fg_journal *j, size_t upto, size_t *line, uint64_t *hash,
		    const char **rec, size_t *len)
{
	if (j->blen < 0) {
		off_t pos = ftello(j->r);

		if (pos < 0)
			return -errno;
		if (pos >= j->end)
			return 0;
		j->blen = getline(&j->buf, &j->bcap, j->r);
		if (j->blen <= 0 || pos + j->blen > j->end ||
		    !parse_record(j->buf, (size_t)j->blen, &j->line, &j->hash, &j->rec_at)) {
			j->blen = -1;
			return ferror(j->r) ? -EIO : -EILSEQ; /* the journal changed under us */
		}
	}
	if (j->line > upto)
		return 0;
	*line = j->line;
	*hash = j->hash;
	*rec = j->buf + j->rec_at;
	*len = (size_t)j->blen - j->rec_at - 1;
	j->blen = -1;
	return 1;
}

int fg_journal_append(struct fg_journal *j, size_t line, uint64_t hash, const char *rec)
{
	char head[48];
	int n = snprintf(head, sizeof(head), "%zu %016" PRIx64 " ", line, hash);
	size_t len = strlen(rec);

	if (j->enospc_after >= 0 && j->appended >= (size_t)j->enospc_after) {
		/* As a full disk does it: part of the line written, then the error. */
		fputs(head, j->w);
		fwrite(rec, 1, len / 2, j->w);
		fflush(j->w);
		return -ENOSPC;
	}
	errno = 0;
	if (fwrite(head, 1, (size_t)n, j->w) != (size_t)n || fwrite(rec, 1, len, j->w) != len ||
	    fputc('\n', j->w) == EOF)
		return errno ? -errno : -EIO;
	j->appended++;
	return 0;
}

int fg_journal_flush(struct fg_journal *j, int sync)
{
	double now;

	errno = 0;
	if (fflush(j->w) != 0)
		return errno ? -errno : -EIO;
	now = fg_now();
	if (sync || now - j->synced >= 1.0) {
		if (fsync(fileno(j->w)) != 0)
			return -errno;
		j->synced = now;
	}
	return 0;
}

size_t fg_journal_appended(const struct fg_journal *j)
{
	return j->appended;
}

void fg_journal_close(struct fg_journal *j)
{
	if (!j)
		return;
	if (j->r)
		fclose(j->r);
	if (j->w)
		fclose(j->w);
	free(j->buf);
	free(j->path);
	free(j);
}

int fg_journal_remove(struct fg_journal *j)
{
	int rc = unlink(j->path) == 0 ? 0 : -errno;

	fg_journal_close(j);
	return rc;
}
