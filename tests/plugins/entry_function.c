/* tests/plugins/entry_function.c - exports fg_plugin_entry as a function:
 * refused before its code is read as a struct fg_plugin. */
#include <fgcore/plugin.h>

FG_PLUGIN_EXPORT int fg_plugin_entry(void);

FG_PLUGIN_EXPORT int fg_plugin_entry(void)
{
	return FG_PLUGIN_CODEC;
}
