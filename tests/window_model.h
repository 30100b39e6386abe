/* tests/window_model.h - a model windowed on every layer with a key/value
 * width a 4-bit cache takes (groups of 64), which the in-tree windowed
 * models (32 wide) are not: FGCORE_TESTDATA's llama-py-128x4 read as
 * Mistral with a sliding window, its weights and tokenizer linked, in a
 * fresh folder under /var/tmp.  Its outputs are compared only with
 * themselves (a ring against the full cache), never with a reference. */
#ifndef FG_TESTS_WINDOW_MODEL_H
#define FG_TESTS_WINDOW_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Make it in dir (a buffer of n bytes); 0, or -1 without FGCORE_TESTDATA or
 * when a file cannot be made. */
static int window_model_make(char *dir, size_t n, int window)
{
	const char *td = getenv("FGCORE_TESTDATA");
	static const char *const linked[] = { "model.safetensors", "tokenizer.json" };
	char src[4096], path[4200], text[8192];
	size_t len;
	FILE *in, *out;

	if (!td || !*td)
		return -1;
	snprintf(src, sizeof(src), "%s/llama/llama-py-128x4", td);
	snprintf(dir, n, "/var/tmp/fgcore-window-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/config.json", src);
	if (!(in = fopen(path, "r")))
		return -1;
	len = fread(text, 1, sizeof(text) - 1, in);
	fclose(in);
	text[len] = 0;
	/* the model type (the family) and a window; the rest as it is */
	char *mt = strstr(text, "\"model_type\": \"llama\"");
	if (!mt)
		return -1;
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (!(out = fopen(path, "w")))
		return -1;
	fprintf(out, "%.*s\"model_type\": \"mistral\",\n  \"sliding_window\": %d%s", (int)(mt - text),
		text, window, mt + strlen("\"model_type\": \"llama\""));
	fclose(out);
	for (size_t i = 0; i < sizeof(linked) / sizeof(linked[0]); i++) {
		char from[4200];
		snprintf(from, sizeof(from), "%s/%s", src, linked[i]);
		snprintf(path, sizeof(path), "%s/%s", dir, linked[i]);
		if (symlink(from, path))
			return -1;
	}
	return 0;
}

static void window_model_remove(const char *dir)
{
	static const char *const files[] = { "config.json", "model.safetensors", "tokenizer.json" };
	char path[4200];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

#endif
