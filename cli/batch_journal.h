/* cli/batch_journal.h - run-batch's journal: every finished request's output
 * record, appended as it finishes, so that a job killed at any point resumes
 * with its finished work.
 *
 * A text file next to the output: a header line naming the job
 * ("fgcore-run-batch-journal 2 <settings>", the settings a JSON object of
 * strings: the fgcore version and whatever changes the bytes of a result,
 * those at fgcore's defaults left out), then one line per
 * finished input line, "<line number> <hash of the input line> <hash of the
 * record> <record>", in the order they finished (the job runs its windows in
 * input order, so the records of one window come before the next window's).
 * A torn last line (kill -9 or a full disk mid-write: no newline) is cut off
 * when the journal is opened again; any other line that is not a record
 * whose hash matches is damage, refused with its file:line.
 *
 * One process at a time: the journal is locked (flock) while open, so a
 * second run of the job, or another job given the same --journal, is
 * refused instead of interleaving its records. */
#ifndef FG_CLI_BATCH_JOURNAL_H
#define FG_CLI_BATCH_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct fg_journal;

/* 64-bit FNV-1a of data, continued from h (start with FG_HASH_INIT). */
#define FG_HASH_INIT 0xcbf29ce484222325ull
uint64_t fg_hash(uint64_t h, const void *data, size_t len);

/* Open the journal at path for the job whose settings are `job` (a JSON
 * object of strings, a setting left out being the default): a new one, or
 * an earlier run's (its records counted into *kept, a torn tail cut off).
 * Returns 0; 2 with why in err (one line) when the file is another job's
 * (err names the first setting that differs), not a journal, or holds a
 * damaged record (err names its file:line); 1 when it cannot be read or
 * written, or another process holds it. */
int fg_journal_open(struct fg_journal **out, const char *path, const json_t *job,
		    size_t *kept, char *err, size_t errlen);

/* The next earlier record if its line number is at most `upto`: 1 with
 * *line, *hash, the record's text (*rec, *len; valid until the next call)
 * and *at, the journal's line that holds it (for messages); 0 when there is
 * none (left for a later window, or the end); -errno on a read error
 * (-EILSEQ: the file changed under us). */
int fg_journal_next(struct fg_journal *j, size_t upto, size_t *line, uint64_t *hash,
		    const char **rec, size_t *len, size_t *at);

/* Append one finished line's record (one line of text, no newline): 0 or
 * -errno (the journal is then to be abandoned; what reached the file before
 * stays valid).  The test hook FGCORE_TEST_RUN_BATCH_ENOSPC=N makes the
 * append after N records in this run write half a line and fail with
 * ENOSPC. */
int fg_journal_append(struct fg_journal *j, size_t line, uint64_t hash, const char *rec);

/* Push the appended records to the file (a kill -9 then loses none of
 * them); sync them to the disk when `sync` is set or a second has passed
 * since the last sync (a power cut loses at most that second).  0 or -errno. */
int fg_journal_flush(struct fg_journal *j, int sync);

/* Records appended by this run (some may still be in the buffer). */
size_t fg_journal_appended(const struct fg_journal *j);
/* Records of this run that are whole in the file: after a failed write,
 * those before the first torn one (what a later run will keep). */
size_t fg_journal_on_disk(struct fg_journal *j);

/* The journal's path. */
const char *fg_journal_path(const struct fg_journal *j);

/* Close it (flushed, kept on disk for a later run; the lock released). */
void fg_journal_close(struct fg_journal *j);
/* Delete it, then close it: the job is complete.  0 or -errno. */
int fg_journal_remove(struct fg_journal *j);

#endif
