/* tests/out_of_tree/oot_compare.c - `oot_compare A.so B.so`: the two codec
 * plugins encode the same tensors to the same bytes and decode them to the
 * same fp32 and fp16 values (both groupings, partial groups, NaN, inf, -0,
 * values beyond the fp16 range, constant stretches).  Built out of tree
 * with the installed headers only; exit 0 when all cases agree. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fgcore/codec.h>
#include <fgcore/half.h>
#include <fgcore/plugin.h>

static const struct fg_codec_ops *load(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	const struct fg_plugin *p;

	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	p = (const struct fg_plugin *)dlsym(h, "fg_plugin_entry");
	if (!p || p->kind != FG_PLUGIN_CODEC || !p->ops) {
		fprintf(stderr, "%s: not a codec plugin\n", path);
		exit(1);
	}
	return p->ops;
}

static unsigned long long st = 0x9e3779b97f4a7c15ull;

static float value(unsigned long long i)
{
	st ^= st << 13, st ^= st >> 7, st ^= st << 17;
	switch (st % 97) {
	case 0: return NAN;
	case 1: return INFINITY;
	case 2: return -0.0f;
	case 3: return 1e6f; /* beyond the fp16 range */
	default: return (i / 300) % 5 == 4 ? 0.75f : (float)((double)(st >> 11) / 9007199254740992.0 * 8.0 - 3.0);
	}
}

int main(int argc, char **argv)
{
	static const unsigned long long shapes[][2] = {
		{ 1, 1 }, { 3, 5 }, { 64, 64 }, { 65, 63 }, { 130, 257 }, { 7, 1001 }, { 300, 700 },
	};
	const struct fg_codec_ops *a, *b;
	int bad = 0, cases = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: oot_compare A.so B.so\n");
		return 2;
	}
	a = load(argv[1]);
	b = load(argv[2]);
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		for (int gd = 0; gd < 2; gd++)
			for (int f16 = 0; f16 < 2; f16++) {
				struct fg_codec_shape s = { .rows = shapes[k][0], .cols = shapes[k][1],
							    .group_dim = gd };
				size_t n = (size_t)(s.rows * s.cols), sz = a->encoded_size(&s);
				float *x = malloc(n * 4), *ya = malloc(n * 4), *yb = malloc(n * 4);
				uint16_t *h = malloc(n * 2), *ha = malloc(n * 2), *hb = malloc(n * 2);
				unsigned char *ea = malloc(sz + 1), *eb = malloc(sz + 1);
				int ok;

				for (size_t i = 0; i < n; i++) {
					x[i] = value(i);
					h[i] = fg_float_to_half(x[i]);
				}
				ok = sz && sz == b->encoded_size(&s) &&
				     (f16 ? a->encode_f16(&s, h, ea) : a->encode_f32(&s, x, ea)) == 0 &&
				     (f16 ? b->encode_f16(&s, h, eb) : b->encode_f32(&s, x, eb)) == 0 &&
				     memcmp(ea, eb, sz) == 0 &&
				     a->decode_f32(&s, ea, ya) == 0 && b->decode_f32(&s, eb, yb) == 0 &&
				     memcmp(ya, yb, n * 4) == 0 &&
				     a->decode_f16(&s, ea, ha) == 0 && b->decode_f16(&s, eb, hb) == 0 &&
				     memcmp(ha, hb, n * 2) == 0;
				cases++;
				if (!ok) {
					bad++;
					printf("MISMATCH: %llux%llu group_dim %d from %s\n", shapes[k][0],
					       shapes[k][1], gd, f16 ? "fp16" : "fp32");
				}
				free(x), free(ya), free(yb), free(h), free(ha), free(hb), free(ea), free(eb);
			}
	printf("%d of %d cases give the same bytes and values\n", cases - bad, cases);
	return bad != 0;
}
