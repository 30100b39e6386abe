/* cli/cmd_tokenize.c - `fgcore tokenize TEXT...`: one JSON array of token ids
 * per TEXT, from the model's tokenizer alone (no weights are loaded). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/fgcore.h>
#include "cli/commands.h"
#include "core/config/config.h"
#include "core/tokenizer/tokenizer.h"

int fg_cmd_tokenize(struct fg_config *cfg, int argc, char **argv)
{
	const char *dir = fg_config_str(cfg, "model", "tokenizer");
	struct fg_tokenizer *t;
	int first = 1, rc = 0;

	/* Options first, as for every command; a TEXT that starts with '-'
	 * goes after "--". */
	for (; first < argc && argv[first][0] == '-' && argv[first][1]; first++) {
		if (!strcmp(argv[first], "--")) {
			first++;
			break;
		}
		if (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h")) {
			printf("usage: fgcore [-c CONFIG] [-o section.key=value]... tokenize [--] TEXT...\n"
			       "  a TEXT that starts with '-' goes after --\n");
			return 0;
		}
		fprintf(stderr, "fgcore: tokenize: unknown option '%s': see fgcore tokenize --help (a TEXT that starts with '-' goes after --)\n",
			argv[first]);
		return 2;
	}
	if (first >= argc) {
		fprintf(stderr, "fgcore: tokenize: give one or more TEXT arguments\n");
		return 2;
	}
	if (!dir || !*dir)
		dir = fg_config_str(cfg, "model", "path");
	if (!strncmp(dir, "dummy:", 6)) {
		fprintf(stderr, "fgcore: tokenize: model %s has no tokenizer: set [model] tokenizer = DIR to a folder with tokenizer.json, or vocab.json and merges.txt\n",
			dir);
		return 2;
	}
	if (fg_tokenizer_load_dir(dir, &t)) {
		fprintf(stderr, "fgcore: %s\n", fg_last_error_text());
		return 1;
	}
	for (int i = first; i < argc && !rc; i++) {
		int32_t *ids;
		size_t n;
		if (fg_tokenizer_encode(t, argv[i], strlen(argv[i]), &ids, &n)) {
			fprintf(stderr, "fgcore: tokenize: %s\n", fg_last_error_text());
			rc = 1;
			break;
		}
		putchar('[');
		for (size_t k = 0; k < n; k++)
			printf(k ? ", %d" : "%d", ids[k]);
		puts("]");
		free(ids);
	}
	fg_tokenizer_free(t);
	return rc;
}
