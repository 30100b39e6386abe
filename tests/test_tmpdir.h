/* tests/test_tmpdir.h - each test's own folder under TMPDIR (tmp_root),
 * made by a checked fixture and removed with everything in it afterwards.
 * The including file defines _GNU_SOURCE first (nftw). */
#ifndef FG_TESTS_TEST_TMPDIR_H
#define FG_TESTS_TEST_TMPDIR_H

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char tmp_root[256];

/* A fresh TMPDIR/<prefix>_XXXXXX in tmp_root. */
static inline void tmp_make(const char *prefix)
{
	const char *t = getenv("TMPDIR");

	snprintf(tmp_root, sizeof(tmp_root), "%s/%s_XXXXXX", t && *t ? t : "/tmp", prefix);
	ck_assert_ptr_nonnull(mkdtemp(tmp_root));
}

static inline int tmp_rm_entry(const char *path, const struct stat *st, int flag,
			       struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static inline void tmp_teardown(void)
{
	nftw(tmp_root, tmp_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
