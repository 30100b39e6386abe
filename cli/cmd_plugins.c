/* cli/cmd_plugins.c - `fgcore plugins [-v]`: every plugin file in the search
 * path, what it is, whether it works on this machine; refused files with why. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/plugin/loader.h"
#include "core/util/error.h"

struct fg_list {
	int verbose;
	int found;
};

static void fg_print_options(const struct fg_plugin *p)
{
	if (p->options == NULL || p->options[0].key == NULL) {
		printf("    options:      none\n");
		return;
	}
	printf("    options:\n");
	for (const struct fg_option *o = p->options; o->key; o++) {
		char range[96] = "";

		if ((o->type == FG_OPT_INT || o->type == FG_OPT_DOUBLE) && o->min != o->max)
			snprintf(range, sizeof(range), " %" PRId64 "..%" PRId64, o->min, o->max);
		printf("      %s (%s%s, default %s): %s\n", o->key, fg_option_type_name(o->type),
		       range, o->def && *o->def ? o->def : (o->type == FG_OPT_STRING ? "\"\"" : "0"),
		       o->help ? o->help : "");
	}
}

/* The plugin's version beside this fgcore's for its kind: an older plugin
 * loads, and what its kind added since is never asked of it. */
static void fg_print_abi(const struct fg_plugin *p)
{
	uint32_t host = fg_plugin_kind_abi(p->kind);
	uint32_t minor = FG_ABI_MINOR_OF(p->abi_version), host_minor = FG_ABI_MINOR_OF(host);
	const char *k = fg_plugin_kind_name(p->kind);

	if (minor >= host_minor)
		printf("    abi:          %s %u.%u, as this fgcore\n", k,
		       FG_ABI_MAJOR_OF(p->abi_version), minor);
	else
		printf("    abi:          %s %u.%u, older than this fgcore's %s %u.%u: what the "
		       "kind added after %u.%u is not used with it\n", k,
		       FG_ABI_MAJOR_OF(p->abi_version), minor, k, FG_ABI_MAJOR_OF(host), host_minor,
		       FG_ABI_MAJOR_OF(p->abi_version), minor);
}

static int fg_list_one(const char *path, void *user)
{
	struct fg_list *l = user;
	struct fg_plugin_handle h;
	const struct fg_plugin *p;
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	l->found++;
	if (fg_plugin_open_file(path, 0, NULL, &h) != 0) {
		printf("%s: refused: %s\n", base, fg_last_error());
		return 0;
	}
	p = h.plugin;
	fg_clear_error();
	int usable = fg_plugin_probe(&h) > 0;
	/* A probe that says no may say why. */
	const char *why = usable ? "" : fg_last_error();
	printf("%s (%s plugin, ABI %u.%u): %s%s%s\n", p->name, fg_plugin_kind_name(p->kind),
	       FG_ABI_MAJOR_OF(p->abi_version), FG_ABI_MINOR_OF(p->abi_version),
	       usable ? "usable" : "not usable on this machine", *why ? ": " : "", why);
	printf("    description:  %s\n", p->description ? p->description : "");
	printf("    capabilities: %s\n",
	       p->capabilities && *p->capabilities ? p->capabilities : "none");
	printf("    file:         %s\n", path);
	if (l->verbose) {
		fg_print_abi(p);
		fg_print_options(p);
	}
	fg_plugin_close(&h);
	return 0;
}

int fg_cmd_plugins(struct fg_config *cfg, int argc, char **argv)
{
	struct fg_list l = { .verbose = fg_cli_verbosity > 0 };
	char search[2048];

	(void)cfg;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
			l.verbose = 1;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			printf("usage: fgcore plugins [-v]\n"
			       "  list the plugins in the search path (FGCORE_PLUGIN_PATH, then the\n"
			       "  installed plugin directory); -v: with their ABI beside this\n"
			       "  fgcore's for their kind, and their options\n");
			return FG_EXIT_OK;
		} else {
			fprintf(stderr, "fgcore: plugins: unexpected argument '%s': use "
				"fgcore plugins [-v]\n", argv[i]);
			return FG_EXIT_USAGE;
		}
	}
	if (fg_plugin_foreach(fg_list_one, &l) < 0) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error());
		return FG_EXIT_RUNTIME;
	}
	if (l.found == 0) {
		fg_plugin_search_path(search, sizeof(search));
		fprintf(stderr, "fgcore: no plugin found in %s: install plugins there or add "
			"their directory to FGCORE_PLUGIN_PATH\n", search);
		return FG_EXIT_RUNTIME;
	}
	return FG_EXIT_OK;
}
