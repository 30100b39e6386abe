/* cli/batch_journal.h - run-batch's journal: every finished request's output
 * record, appended as it finishes, so that a job killed at any point resumes
 * with its finished work.
 *
 * A text file next to the output: a header line naming the job
 * ("fgcore-run-batch-journal 1 <fingerprint>"), then one line per finished
 * input line, "<line number> <hash of the input line> <record>", in the order
 * they finished (the job runs its windows in input order, so the records of
 * one window come before the next window's).  A torn last line (kill -9 or
 * a full disk mid-write) is cut off when the journal is opened again. */
#ifndef FG_CLI_BATCH_JOURNAL_H
#define FG_CLI_BATCH_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

struct fg_journal;

/* 64-bit FNV-1a of data, continued from h (start with FG_HASH_INIT). */
#define FG_HASH_INIT 0xcbf29ce484222325ull
uint64_t fg_hash(uint64_t h, const void *data, size_t len);

/* Open the journal at path for the job of this fingerprint: a new one, or an
 * earlier run's (its valid records counted into *kept, a torn tail cut off).
 * Returns 0, or 2 (the file is another job's, or not a journal) / 1 (it cannot
 * be read or written) with why in err (one line). */
int fg_journal_open(struct fg_journal **out, const char *path, uint64_t fingerprint,
		    size_t *kept, char *err, size_t errlen);

/* The next earlier record if its line number is at most `upto`: 1 with
 * *line, *hash and the record's text (*rec, *len; valid until the next
 * call), 0 when there is none (left for a later window, or the end), -errno
 * on a read error. */
int fg_journal_next(struct fg_journal *j, size_t upto, size_t *line, uint64_t *hash,
		    const char **rec, size_t *len);

/* Append one finished line's record: 0 or -errno (the journal is then to be
 * abandoned; what was appended before stays valid).  The test hook
 * FGCORE_TEST_RUN_BATCH_ENOSPC=N makes the append after N records in this
 * run write half a line and fail with ENOSPC. */
int fg_journal_append(struct fg_journal *j, size_t line, uint64_t hash, const char *rec);

/* Push the appended records to the file (a kill -9 then loses none of
 * them); sync them to the disk when `sync` is set or a second has passed
 * since the last sync (a power cut loses at most that second).  0 or -errno. */
int fg_journal_flush(struct fg_journal *j, int sync);

/* Records appended by this run. */
size_t fg_journal_appended(const struct fg_journal *j);

/* Close it (flushed, kept on disk for a later run). */
void fg_journal_close(struct fg_journal *j);
/* Close and delete it: the job is complete.  0 or -errno. */
int fg_journal_remove(struct fg_journal *j);

#endif
