/* core/plugin/elf_check.h - is a file a complete ELF shared object for this
 * machine?  Checked before dlopen, which maps the file's segments and dies of
 * SIGBUS on a page past the end of a truncated file. */
#ifndef FG_PLUGIN_ELF_CHECK_H
#define FG_PLUGIN_ELF_CHECK_H

#include <stddef.h>

/* 0 when the open file fd (size bytes) is an ELF shared object of this
 * build's class, byte order and machine whose headers, segments and sections
 * all lie inside the file; else -ENOEXEC (-errno when it cannot be read) with
 * what is wrong in why (no file name, no trailing newline). */
int fg_elf_check_fd(int fd, unsigned long long size, char *why, size_t whylen);

#endif
