/* tests/plugins/entry_small.c - exports fg_plugin_entry as a 4-byte object
 * (the ABI version alone): refused, the struct would be read past its end. */
#include <stdint.h>

#include <fgcore/plugin.h>

FG_PLUGIN_EXPORT const uint32_t fg_plugin_entry = FG_ABI_VERSION;
