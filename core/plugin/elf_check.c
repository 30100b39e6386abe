/* core/plugin/elf_check.c - validate a plugin's ELF headers before dlopen.
 *
 * dlopen maps every PT_LOAD segment from the file; a segment reaching past
 * the end of a truncated file faults (SIGBUS) when the loader touches it, and
 * takes the whole process down.  So the header, the program headers and every
 * segment (and, when present, the section headers and the sections' contents)
 * must lie inside the file, and the file must be a shared object for this
 * build.  This is a check against damaged files, not a security boundary: a
 * crafted file can still do anything its code does once loaded. */
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plugin/elf_check.h"
#include "core/util/fileio.h"

#if UINTPTR_MAX > 0xffffffffu
#define FG_ELF_CLASS ELFCLASS64
typedef Elf64_Ehdr fg_ehdr;
typedef Elf64_Phdr fg_phdr;
typedef Elf64_Shdr fg_shdr;
#else
#define FG_ELF_CLASS ELFCLASS32
typedef Elf32_Ehdr fg_ehdr;
typedef Elf32_Phdr fg_phdr;
typedef Elf32_Shdr fg_shdr;
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FG_ELF_DATA ELFDATA2LSB
#else
#define FG_ELF_DATA ELFDATA2MSB
#endif

/* This build's e_machine; 0: not known here, not checked. */
#if defined(__x86_64__)
#define FG_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define FG_ELF_MACHINE EM_AARCH64
#elif defined(__i386__)
#define FG_ELF_MACHINE EM_386
#elif defined(__arm__)
#define FG_ELF_MACHINE EM_ARM
#elif defined(__powerpc64__)
#define FG_ELF_MACHINE EM_PPC64
#elif defined(__powerpc__)
#define FG_ELF_MACHINE EM_PPC
#elif defined(__s390__)
#define FG_ELF_MACHINE EM_S390
#elif defined(__riscv)
#define FG_ELF_MACHINE EM_RISCV
#else
#define FG_ELF_MACHINE 0
#endif

/* A program header table larger than this is not a real plugin. */
#define FG_ELF_MAX_PHNUM 4096
#define FG_ELF_MAX_SHNUM 65536

static int fg_elf_why(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fg_elf_why(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -ENOEXEC;
}

/* [off, off + len) inside a file of size bytes, without overflow. */
static int fg_elf_inside(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static const char *fg_elf_ptype(uint32_t t)
{
	switch (t) {
	case PT_LOAD:
		return "PT_LOAD";
	case PT_DYNAMIC:
		return "PT_DYNAMIC";
	case PT_INTERP:
		return "PT_INTERP";
	case PT_NOTE:
		return "PT_NOTE";
	case PT_PHDR:
		return "PT_PHDR";
	case PT_TLS:
		return "PT_TLS";
	case PT_GNU_EH_FRAME:
		return "PT_GNU_EH_FRAME";
	case PT_GNU_RELRO:
		return "PT_GNU_RELRO";
	default:
		return "segment";
	}
}

static int fg_elf_check_sections(int fd, const fg_ehdr *eh, uint64_t size, char *why,
				 size_t whylen)
{
	fg_shdr *sh = NULL, first;
	uint64_t n = eh->e_shnum;
	int rc;

	if (eh->e_shoff == 0)
		return 0; /* no section header table: allowed, the loader does not need one */
	if (eh->e_shentsize != sizeof(fg_shdr))
		return fg_elf_why(why, whylen, "section header size %u, expected %zu",
				  eh->e_shentsize, sizeof(fg_shdr));
	if (!fg_elf_inside(eh->e_shoff, sizeof(fg_shdr), size))
		return fg_elf_why(why, whylen,
				  "truncated: the section headers start at byte %llu of a "
				  "%llu-byte file",
				  (unsigned long long)eh->e_shoff, (unsigned long long)size);
	rc = fg_pread_full(fd, &first, sizeof(first), eh->e_shoff);
	if (rc)
		return rc == -EIO ? fg_elf_why(why, whylen, "the file shrank while read") : rc;
	if (n == 0)
		n = first.sh_size; /* more than SHN_LORESERVE sections: the count is here */
	if (n > FG_ELF_MAX_SHNUM)
		return fg_elf_why(why, whylen, "%llu sections, more than a plugin has",
				  (unsigned long long)n);
	if (!fg_elf_inside(eh->e_shoff, n * sizeof(fg_shdr), size))
		return fg_elf_why(why, whylen,
				  "truncated: its %llu section headers at byte %llu end past "
				  "the end of the %llu-byte file",
				  (unsigned long long)n, (unsigned long long)eh->e_shoff,
				  (unsigned long long)size);
	sh = malloc((size_t)n * sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	rc = fg_pread_full(fd, sh, (size_t)n * sizeof(*sh), eh->e_shoff);
	if (rc) {
		free(sh);
		return rc == -EIO ? fg_elf_why(why, whylen, "the file shrank while read") : rc;
	}
	for (uint64_t i = 0; i < n; i++) {
		if (sh[i].sh_type == SHT_NOBITS || sh[i].sh_type == SHT_NULL || sh[i].sh_size == 0)
			continue;
		if (!fg_elf_inside(sh[i].sh_offset, sh[i].sh_size, size)) {
			rc = fg_elf_why(why, whylen,
					"truncated: section %llu (bytes %llu..%llu) ends past the "
					"end of the %llu-byte file",
					(unsigned long long)i, (unsigned long long)sh[i].sh_offset,
					(unsigned long long)sh[i].sh_offset +
						(unsigned long long)sh[i].sh_size,
					(unsigned long long)size);
			break;
		}
	}
	free(sh);
	return rc;
}

int fg_elf_check_fd(int fd, unsigned long long fsize, char *why, size_t whylen)
{
	static const unsigned char magic[SELFMAG] = { ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3 };
	uint64_t size = fsize, phbytes;
	fg_phdr *ph = NULL;
	int rc, loads = 0, dynamic = 0;
	fg_ehdr eh;

	memset(&eh, 0, sizeof(eh));
	rc = fg_pread_full(fd, &eh, size < sizeof(eh) ? (size_t)size : sizeof(eh), 0);
	if (rc)
		return rc == -EIO ? fg_elf_why(why, whylen, "the file shrank while read") : rc;
	if (size < SELFMAG || memcmp(eh.e_ident, magic, SELFMAG) != 0)
		return fg_elf_why(why, whylen, "not an ELF file (no ELF magic number)");
	if (size < sizeof(eh))
		return fg_elf_why(why, whylen,
				  "truncated: %llu bytes, shorter than an ELF header (%zu)",
				  (unsigned long long)size, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != FG_ELF_CLASS)
		return fg_elf_why(why, whylen, "a %s ELF file; this build is %s",
				  eh.e_ident[EI_CLASS] == ELFCLASS32   ? "32-bit"
				  : eh.e_ident[EI_CLASS] == ELFCLASS64 ? "64-bit"
								       : "invalid-class",
				  FG_ELF_CLASS == ELFCLASS64 ? "64-bit" : "32-bit");
	if (eh.e_ident[EI_DATA] != FG_ELF_DATA)
		return fg_elf_why(why, whylen, "an ELF file of the other byte order");
	if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT)
		return fg_elf_why(why, whylen, "ELF version %u, expected %u", eh.e_ident[EI_VERSION],
				  EV_CURRENT);
	if (eh.e_type != ET_DYN)
		return fg_elf_why(why, whylen, "an ELF %s, not a shared object",
				  eh.e_type == ET_EXEC ? "executable"
				  : eh.e_type == ET_REL ? "object file (.o)"
				  : eh.e_type == ET_CORE ? "core dump"
							 : "file of unknown type");
	if (FG_ELF_MACHINE && eh.e_machine != FG_ELF_MACHINE)
		return fg_elf_why(why, whylen, "built for ELF machine %u; this build is machine %u",
				  eh.e_machine, FG_ELF_MACHINE);
	if (eh.e_ehsize != sizeof(eh))
		return fg_elf_why(why, whylen, "ELF header size %u, expected %zu", eh.e_ehsize,
				  sizeof(eh));
	if (eh.e_phnum == 0 || eh.e_phnum == PN_XNUM || eh.e_phnum > FG_ELF_MAX_PHNUM)
		return fg_elf_why(why, whylen, "%u program headers: a shared object has 1 to %d",
				  eh.e_phnum, FG_ELF_MAX_PHNUM);
	if (eh.e_phentsize != sizeof(fg_phdr))
		return fg_elf_why(why, whylen, "program header size %u, expected %zu",
				  eh.e_phentsize, sizeof(fg_phdr));
	phbytes = (uint64_t)eh.e_phnum * sizeof(fg_phdr);
	if (!fg_elf_inside(eh.e_phoff, phbytes, size))
		return fg_elf_why(why, whylen,
				  "truncated: its %u program headers at byte %llu end past the "
				  "end of the %llu-byte file",
				  eh.e_phnum, (unsigned long long)eh.e_phoff,
				  (unsigned long long)size);
	ph = malloc((size_t)phbytes);
	if (!ph)
		return -ENOMEM;
	rc = fg_pread_full(fd, ph, (size_t)phbytes, eh.e_phoff);
	if (rc) {
		free(ph);
		return rc == -EIO ? fg_elf_why(why, whylen, "the file shrank while read") : rc;
	}
	for (unsigned i = 0; i < eh.e_phnum && !rc; i++) {
		const fg_phdr *p = &ph[i];

		loads += p->p_type == PT_LOAD;
		dynamic += p->p_type == PT_DYNAMIC;
		if (p->p_type == PT_LOAD && p->p_filesz > p->p_memsz)
			rc = fg_elf_why(why, whylen,
					"program header %u (PT_LOAD) has more bytes in the file "
					"(%llu) than in memory (%llu)",
					i, (unsigned long long)p->p_filesz,
					(unsigned long long)p->p_memsz);
		else if (p->p_filesz && !fg_elf_inside(p->p_offset, p->p_filesz, size))
			rc = fg_elf_why(why, whylen,
					"truncated: program header %u (%s, bytes %llu..%llu) ends "
					"past the end of the %llu-byte file",
					i, fg_elf_ptype(p->p_type), (unsigned long long)p->p_offset,
					(unsigned long long)p->p_offset +
						(unsigned long long)p->p_filesz,
					(unsigned long long)size);
	}
	free(ph);
	if (rc)
		return rc;
	if (!loads || !dynamic)
		return fg_elf_why(why, whylen, "no %s segment, so not a shared object",
				  !loads ? "PT_LOAD" : "PT_DYNAMIC");
	return fg_elf_check_sections(fd, &eh, size, why, whylen);
}
