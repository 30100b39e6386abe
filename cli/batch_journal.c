/* cli/batch_journal.c - run-batch's journal (see batch_journal.h). */
#define _GNU_SOURCE /* getline */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/batch_journal.h"
#include "core/util/clock.h"
#include "core/util/fileio.h"

#define MAGIC "fgcore-run-batch-journal "
#define VERSION "2 "
#define HEADER_MAX (1u << 20)   /* a header line longer than this is no journal's */
#define OUT_FLUSH (1u << 20)    /* appended bytes held before they are written */

struct fg_journal {
	char *path;
	int fd;           /* locked while open; records are written through it */
	off_t size;       /* the file's length: whole records only */
	/* the earlier records, read up to `end` */
	FILE *r;
	off_t end;
	size_t rline;     /* the journal's line that r reads next */
	char *buf;        /* the record read ahead */
	size_t bcap;
	ssize_t blen;     /* -1: nothing read ahead */
	size_t line, rec_at, at;
	uint64_t hash;
	/* appended records not written yet */
	char *out;
	size_t olen, ocap, on;
	double synced;    /* when it was last synced */
	size_t appended, on_disk;
	int failed;       /* a write failed: nothing more goes to the file */
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

/* Write len bytes at off: 0, or the errno of the write that failed (a
 * short write is retried, so a full disk or a file size limit is named as
 * such) with *done the bytes written before it. */
static int pwrite_all(int fd, const char *buf, size_t len, off_t off, size_t *done)
{
	*done = 0;
	while (*done < len) {
		ssize_t w = pwrite(fd, buf + *done, len - *done, off + (off_t)*done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : EIO;
		*done += (size_t)w;
	}
	return 0;
}

static int hex16(const char *s, uint64_t *v)
{
	uint64_t x = 0;

	for (int i = 0; i < 16; i++) {
		int c = (unsigned char)s[i], d = c >= '0' && c <= '9' ? c - '0'
					       : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return 0;
		x = x << 4 | (uint64_t)d;
	}
	*v = x;
	return 1;
}

/* A journal line "<line> <hash> <record hash> <record>\n" whose record
 * hash matches: 1 with its fields, 0 when it is not one.  Strict: what
 * fg_journal_append writes and nothing else. */
static int parse_record(const char *s, size_t len, size_t *line, uint64_t *hash, size_t *rec_at)
{
	size_t i = 0, l = 0;
	uint64_t rh;

	if (len < 2 || s[len - 1] != '\n')
		return 0;
	while (i < len && i < 20 && s[i] >= '0' && s[i] <= '9') {
		if (l > (SIZE_MAX - 9) / 10)
			return 0;
		l = l * 10 + (size_t)(s[i++] - '0');
	}
	if (i == 0 || l == 0 || s[0] == '0' || len < i + 36 || s[i] != ' ' ||
	    !hex16(s + i + 1, hash) || s[i + 17] != ' ' || !hex16(s + i + 18, &rh) ||
	    s[i + 34] != ' ')
		return 0;
	i += 35;
	if (i >= len - 1 || fg_hash(FG_HASH_INIT, s + i, len - 1 - i) != rh)
		return 0;
	*line = l;
	*rec_at = i;
	return 1;
}

/* The first line of f (at most HEADER_MAX bytes) into buf: its length
 * with the newline, 0 when there is none (a torn or empty file), -1 when
 * it is longer, -2 on a read error. */
static ssize_t read_header(FILE *f, char *buf)
{
	size_t n = 0;
	int c;

	while (n < HEADER_MAX && (c = getc(f)) != EOF) {
		buf[n++] = (char)c;
		if (c == '\n')
			return (ssize_t)n;
	}
	return ferror(f) ? -2 : n == HEADER_MAX ? -1 : 0;
}

/* Does the earlier run's header name the same job?  0, or 1 with what
 * differs in `what`. */
static int compare_job(const json_t *old, const json_t *job, char *what, size_t len)
{
	const char *key;
	json_t *v;
	size_t diff = 0;

	what[0] = '\0';
	json_object_foreach((json_t *)job, key, v) {
		json_t *o = json_object_get(old, key);
		if (o && json_equal(o, v))
			continue;
		if (!diff++)
			snprintf(what, len, "%s differs (%s%.300s%s in the journal, \"%.300s\" in this run)",
				 key, o ? "\"" : "", o ? json_string_value(o) : "the default", o ? "\"" : "",
				 json_string_value(v));
	}
	json_object_foreach((json_t *)old, key, v)
		if (!json_object_get(job, key) && !diff++)
			snprintf(what, len, "%s differs (\"%.300s\" in the journal, the default in this run)",
				 key, json_string_value(v));
	if (diff > 1) {
		size_t n = strlen(what);
		snprintf(what + n, len - n, ", and %zu more setting%s", diff - 1, diff > 2 ? "s" : "");
	}
	return diff != 0;
}

/* Is the header (without MAGIC and its newline) the job's?  0, or 2 with
 * why in err. */
static int check_header(const char *path, const char *h, size_t len, const json_t *job,
			char *err, size_t errlen)
{
	json_error_t je;
	json_t *old;
	const char *key;
	json_t *v;
	char what[800];
	int rc = 0;

	if (len >= 2 && !strncmp(h, "1 ", 2)) {
		snprintf(err, errlen, "the journal %s was written by an earlier fgcore (journal format 1), which cannot be resumed by this one: finish the job with that fgcore, or remove %s to start over",
			 path, path);
		return 2;
	}
	if (len < strlen(VERSION) || strncmp(h, VERSION, strlen(VERSION))) {
		snprintf(err, errlen, "%s is not a run-batch journal of a format this fgcore knows: remove it or give another --journal",
			 path);
		return 2;
	}
	old = json_loadb(h + strlen(VERSION), len - strlen(VERSION), JSON_REJECT_DUPLICATES, &je);
	json_object_foreach(old, key, v)
		if (!json_is_string(v))
			break;
	if (!json_is_object(old) || key) {
		snprintf(err, errlen, "%s:1: the journal's header is damaged (not the job's settings as a JSON object of strings): remove %s to start over",
			 path, path);
		json_decref(old);
		return 2;
	}
	if (compare_job(old, job, what, sizeof(what))) {
		snprintf(err, errlen, "the journal %s is another job's: %s; give the same settings to resume it, or remove %s to start over",
			 path, what, path);
		rc = 2;
	}
	json_decref(old);
	return rc;
}

/* Open and lock the journal, retrying when it was removed or replaced while
 * we waited for it (a run that had it finished).  0, or 1 / 2 with err. */
static int lock_open(const char *path, int *out, char *err, size_t errlen)
{
	for (int tries = 0; tries < 16; tries++) {
		struct stat a, b;
		int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK,
			      0666), fl;

		if (fd < 0) {
			snprintf(err, errlen, "cannot open the journal %s: %s", path, strerror(errno));
			return 1;
		}
		if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
			snprintf(err, errlen, "the journal %s is %s, not a regular file: give another --journal",
				 path, fg_file_kind(a.st_mode));
			close(fd);
			return 2;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			int e = errno;
			if (e == EWOULDBLOCK) {
				snprintf(err, errlen, "the journal %s is in use by another run-batch (a run of the same job, or another job given the same --journal): wait for it to end, or give another --journal",
					 path);
				close(fd);
				return 1;
			}
			/* A file system without locks: the job still runs. */
			if (e != ENOLCK && e != EOPNOTSUPP && e != ENOSYS) {
				snprintf(err, errlen, "cannot lock the journal %s: %s", path, strerror(e));
				close(fd);
				return 1;
			}
			fprintf(stderr, "fgcore: run-batch: warning: cannot lock the journal %s (%s): nothing stops a second run of the job from writing it too\n",
				path, strerror(e));
		}
		if (stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			fl = fcntl(fd, F_GETFL);
			if (fl != -1)
				(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
			*out = fd;
			return 0;
		}
		close(fd);
	}
	snprintf(err, errlen, "the journal %s keeps being removed or replaced by another process: give another --journal",
		 path);
	return 1;
}

/* An earlier run's journal: its header checked, its records counted and
 * checked, a torn last line cut off.  0, or 1 / 2 with err. */
static int scan(struct fg_journal *j, const json_t *job, off_t *hlen, size_t *kept, char *err,
		size_t errlen)
{
	FILE *f = NULL;
	char *line = NULL;
	size_t cap = 0, l, ra, n_line = 1;
	uint64_t h;
	ssize_t n;
	off_t at;
	int fd = dup(j->fd), rc = 1;

	if (fd < 0 || !(f = fdopen(fd, "r")) || !(line = malloc(HEADER_MAX))) {
		snprintf(err, errlen, "cannot read the journal %s: %s", j->path, strerror(errno));
		if (f)
			fclose(f);
		else if (fd >= 0)
			close(fd);
		return 1;
	}
	cap = HEADER_MAX;
	n = read_header(f, line);
	if (n == -2) {
		snprintf(err, errlen, "reading the journal %s failed: %s", j->path, strerror(errno));
		goto out;
	}
	if (n == 0 && !memcmp(line, MAGIC, (size_t)j->size < strlen(MAGIC) ? (size_t)j->size
									 : strlen(MAGIC))) {
		/* A header torn as it was first written: a new job's, no record. */
		*hlen = 0;
		rc = 0;
		goto out;
	}
	if (n <= 0 || (size_t)n < strlen(MAGIC) || memcmp(line, MAGIC, strlen(MAGIC))) {
		snprintf(err, errlen, "%s is not a run-batch journal: remove it or give another --journal",
			 j->path);
		rc = 2;
		goto out;
	}
	if ((rc = check_header(j->path, line + strlen(MAGIC), (size_t)n - strlen(MAGIC) - 1, job, err,
			       errlen)))
		goto out;
	rc = 1;
	*hlen = at = n;
	/* Every whole line a record of this job's; only the last may be torn. */
	while ((n = getline(&line, &cap, f)) > 0) {
		n_line++;
		if (line[n - 1] != '\n')
			break;
		if (!parse_record(line, (size_t)n, &l, &h, &ra)) {
			snprintf(err, errlen, "%s:%zu: not a record as run-batch writes them (damaged or edited: its form or its hash is wrong): restore the journal, or remove %s to start over",
				 j->path, n_line, j->path);
			rc = 2;
			goto out;
		}
		at += n;
		(*kept)++;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "reading the journal %s failed: %s", j->path, strerror(errno));
		goto out;
	}
	if (at < j->size && ftruncate(j->fd, at) != 0) {
		snprintf(err, errlen, "cannot cut the torn end of the journal %s: %s", j->path,
			 strerror(errno));
		goto out;
	}
	j->size = at;
	rc = 0;
out:
	free(line);
	fclose(f);
	return rc;
}

int fg_journal_open(struct fg_journal **out, const char *path, const json_t *job,
		    size_t *kept, char *err, size_t errlen)
{
	struct fg_journal *j = calloc(1, sizeof(*j));
	const char *hook = getenv("FGCORE_TEST_RUN_BATCH_ENOSPC");
	char *head = NULL, *settings = NULL;
	struct stat st;
	off_t hlen = 0;
	int rc;

	*out = NULL;
	*kept = 0;
	if (!j || !(j->path = strdup(path))) {
		snprintf(err, errlen, "out of memory");
		free(j);
		return 1;
	}
	j->fd = -1;
	j->blen = -1;
	j->enospc_after = hook && *hook ? strtol(hook, NULL, 10) : -1;
	if ((rc = lock_open(path, &j->fd, err, errlen)))
		goto fail;
	rc = 1;
	if (fstat(j->fd, &st) != 0) {
		snprintf(err, errlen, "cannot read the journal %s: %s", path, strerror(errno));
		goto fail;
	}
	j->size = st.st_size;
	if (j->size > 0 && (rc = scan(j, job, &hlen, kept, err, errlen)))
		goto fail;
	rc = 1;
	if (hlen == 0) {
		/* A new job: its header, on the disk before any record. */
		size_t len, done;
		int e;

		settings = json_dumps(job, JSON_COMPACT | JSON_ENSURE_ASCII);
		if (!settings || !(head = malloc(strlen(settings) + sizeof(MAGIC VERSION) + 1))) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		len = (size_t)sprintf(head, MAGIC VERSION "%s\n", settings);
		e = ftruncate(j->fd, 0) ? errno : pwrite_all(j->fd, head, len, 0, &done);
		if (!e && fsync(j->fd) != 0)
			e = errno;
		if (e) {
			/* Still locked: a journal that holds nothing is not left. */
			snprintf(err, errlen, "cannot write the journal %s: %s", path, strerror(e));
			unlink(path);
			goto fail;
		}
		j->size = hlen = (off_t)len;
	}
	j->end = j->size;
	j->r = fopen(path, "re");
	if (!j->r || fseeko(j->r, hlen, SEEK_SET) != 0) {
		snprintf(err, errlen, "cannot read the journal %s: %s", path, strerror(errno));
		goto fail;
	}
	j->rline = 2;
	j->synced = fg_now();
	free(settings);
	free(head);
	*out = j;
	return 0;
fail:
	free(settings);
	free(head);
	j->failed = 1; /* nothing of this run's to write */
	fg_journal_close(j);
	return rc;
}

int fg_journal_next(struct fg_journal *j, size_t upto, size_t *line, uint64_t *hash,
		    const char **rec, size_t *len, size_t *at)
{
	if (j->blen < 0) {
		off_t pos = ftello(j->r);

		if (pos < 0)
			return -errno;
		if (pos >= j->end)
			return 0;
		j->blen = getline(&j->buf, &j->bcap, j->r);
		j->at = j->rline++;
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
	*at = j->at;
	j->blen = -1;
	return 1;
}

/* A write failed after `done` bytes of what was appended reached the file:
 * the records written whole are counted, a torn one is cut off (best
 * effort: a full disk gets its room back), and nothing is written any more. */
static void torn(struct fg_journal *j, size_t done)
{
	size_t whole = 0;

	for (size_t i = 0; i < done; i++)
		if (j->out[i] == '\n') {
			j->on_disk++;
			whole = i + 1;
		}
	j->size += (off_t)whole;
	(void)!ftruncate(j->fd, j->size);
	j->failed = 1;
}

/* Write what was appended. */
static int write_out(struct fg_journal *j)
{
	size_t done = 0;
	int e;

	if (j->failed)
		return -EIO;
	if ((e = pwrite_all(j->fd, j->out, j->olen, j->size, &done))) {
		torn(j, done);
		return -e;
	}
	j->size += (off_t)j->olen;
	j->on_disk += j->on;
	j->olen = j->on = 0;
	return 0;
}

int fg_journal_append(struct fg_journal *j, size_t line, uint64_t hash, const char *rec)
{
	size_t len = strlen(rec), need;
	char head[64];
	int n;

	if (j->failed)
		return -EIO;
	if (!len || memchr(rec, '\n', len))
		return -EINVAL;
	n = snprintf(head, sizeof(head), "%zu %016" PRIx64 " %016" PRIx64 " ", line, hash,
		     fg_hash(FG_HASH_INIT, rec, len));
	need = j->olen + (size_t)n + len + 1;
	if (need > j->ocap) {
		size_t cap = j->ocap ? j->ocap : 4096;
		char *p;
		while (cap < need)
			cap *= 2;
		if (!(p = realloc(j->out, cap)))
			return -ENOMEM;
		j->out = p;
		j->ocap = cap;
	}
	memcpy(j->out + j->olen, head, (size_t)n);
	memcpy(j->out + j->olen + n, rec, len);
	j->out[j->olen + (size_t)n + len] = '\n';
	if (j->enospc_after >= 0 && j->appended >= (size_t)j->enospc_after) {
		/* As a full disk does it: part of the line written, then the error. */
		size_t half = j->olen + ((size_t)n + len) / 2;
		ssize_t w = pwrite(j->fd, j->out, half, j->size);
		torn(j, w > 0 ? (size_t)w : 0);
		return -ENOSPC;
	}
	j->olen = need;
	j->on++;
	j->appended++;
	return j->olen >= OUT_FLUSH ? write_out(j) : 0;
}

int fg_journal_flush(struct fg_journal *j, int sync)
{
	double now;
	int rc = j->olen ? write_out(j) : j->failed ? -EIO : 0;

	if (rc)
		return rc;
	now = fg_now();
	if (sync || now - j->synced >= 1.0) {
		if (fsync(j->fd) != 0)
			return -errno;
		j->synced = now;
	}
	return 0;
}

size_t fg_journal_appended(const struct fg_journal *j)
{
	return j->appended;
}

size_t fg_journal_on_disk(struct fg_journal *j)
{
	return j->on_disk;
}

const char *fg_journal_path(const struct fg_journal *j)
{
	return j->path;
}

void fg_journal_close(struct fg_journal *j)
{
	if (!j)
		return;
	if (j->olen && !j->failed)
		(void)write_out(j);
	if (j->r)
		fclose(j->r);
	if (j->fd >= 0)
		close(j->fd);
	free(j->out);
	free(j->buf);
	free(j->path);
	free(j);
}

int fg_journal_remove(struct fg_journal *j)
{
	/* Unlinked while still locked: no other run can take it half removed. */
	int rc = unlink(j->path) == 0 ? 0 : -errno;

	j->failed = 1;
	fg_journal_close(j);
	return rc;
}
