/* tests/plugins/entry_misaligned.c - exports fg_plugin_entry as an object one
 * byte into a buffer, so misaligned for a struct fg_plugin: refused.  C
 * cannot place an object so, hence the assembler directives. */
#include <fgcore/plugin.h>

__attribute__((used, aligned(16))) const unsigned char entry_misaligned_bytes
	[sizeof(struct fg_plugin) + 16] = { 1 };

__asm__(".globl fg_plugin_entry\n"
	".type fg_plugin_entry, \"object\"\n"
	".size fg_plugin_entry, 8\n"
	".set fg_plugin_entry, entry_misaligned_bytes + 1\n");
