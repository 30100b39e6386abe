/* cli/cmd_config.c - `fgcore config`: the effective configuration, checked
 * against the plugins it names; `fgcore config --man`: fgcore.ini(5). */
#include <stdio.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/config/config.h"
#include "core/plan/policy.h"
#include "core/util/error.h"

int fg_cmd_config(struct fg_config *cfg, int argc, char **argv)
{
	int man = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--man") == 0) {
			man = 1;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			printf("usage: fgcore [-c CONFIG] [-o section.key=value]... config [--man]\n"
			       "  print the effective configuration, every key included, after\n"
			       "  checking it and the options of the plugins it names;\n"
			       "  --man: write the manual page fgcore.ini(5) (roff) instead\n");
			return FG_EXIT_OK;
		} else {
			fprintf(stderr, "fgcore: config: unexpected argument '%s': use "
				"fgcore config [--man]\n", argv[i]);
			return FG_EXIT_USAGE;
		}
	}
	if (man) {
		if (fg_config_write_man(stdout) != 0) {
			fprintf(stderr, "fgcore: %s\n", fg_last_error());
			return FG_EXIT_RUNTIME;
		}
		return FG_EXIT_OK;
	}
	struct fg_policy policy;
	if (fg_config_check(cfg) != 0 || fg_policy_from_config(cfg, &policy) != 0) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error());
		return FG_EXIT_USAGE;
	}
	if (fg_config_print(cfg, stdout) != 0) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error());
		return FG_EXIT_RUNTIME;
	}
	return FG_EXIT_OK;
}
