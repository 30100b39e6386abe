/* cli/flexgen_flags.h - FlexGen's flags (--percent, --gpu-batch-size, ...) as overrides. */
#ifndef FG_CLI_FLEXGEN_FLAGS_H
#define FG_CLI_FLEXGEN_FLAGS_H

#include <stddef.h>

struct fg_flexgen_flags {
	char **sets; /* "section.key=value", applied after -o */
	size_t n;
};

/* Remove FlexGen's flags from argv (anywhere in it) and turn them into sets.
 * Returns 0, or -EINVAL with a message in err. */
int fg_flexgen_flags_take(struct fg_flexgen_flags *ff, int *argc, char **argv, char *err,
			  size_t errlen);
void fg_flexgen_flags_free(struct fg_flexgen_flags *ff);

#endif
