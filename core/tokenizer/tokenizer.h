/* core/tokenizer/tokenizer.h - GPT-2 byte-level BPE (the tokenizer OPT ships). */
#ifndef FG_TOKENIZER_TOKENIZER_H
#define FG_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct fg_tokenizer;

/* Load vocab.json + merges.txt from `dir`, plus the special tokens of
 * special_tokens_map.json / tokenizer_config.json / added_tokens.json when
 * present.  Errors name the file (and line or offset). */
int fg_tokenizer_load_dir(const char *dir, struct fg_tokenizer **out);
/* The same from explicit file paths (no special-token files). */
int fg_tokenizer_load(const char *vocab_json, const char *merges_txt, struct fg_tokenizer **out);
void fg_tokenizer_free(struct fg_tokenizer *t);

/* Encode len bytes of text (any bytes: invalid UTF-8 is encoded byte-wise,
 * never rejected); special tokens in the text match as single ids.  *ids is
 * malloc'd.  Thread-safe on a shared tokenizer.  -EINVAL, with a line naming
 * the tokenizer.json's pattern, for a text whose matching would take more
 * than time linear in its length (a pattern that rescans it from every
 * position): the text is refused, the tokenizer stays usable. */
int fg_tokenizer_encode(const struct fg_tokenizer *t, const char *text, size_t len,
			int32_t **ids, size_t *n);
/* Decode to bytes (*text malloc'd and NUL-terminated); unknown ids: -EINVAL. */
int fg_tokenizer_decode(const struct fg_tokenizer *t, const int32_t *ids, size_t n, char **text,
			size_t *len);
/* chars[i] = the characters (code points) of decode(ids[0..i)), for every
 * i in [0, n]: a token's offset in the text of the tokens before it, as
 * echoed log-probabilities give it.  One pass where decoding joins the
 * tokens' bytes and repairs them (GPT-2's files, a tokenizer.json whose only
 * decoder is ByteLevel); with other decoders, each prefix decoded.  -ENOMEM
 * only (an unknown id counts as decode shows it). */
int fg_tokenizer_decode_offsets(const struct fg_tokenizer *t, const int32_t *ids, size_t n,
				size_t *chars);
/* Bytes of one token's text (for stop-string matching); NULL if out of range. */
const char *fg_tokenizer_token_bytes(const struct fg_tokenizer *t, int32_t id, size_t *len);
size_t fg_tokenizer_vocab_size(const struct fg_tokenizer *t);
/* Id of a token string such as "</s>", or -1. */
int32_t fg_tokenizer_lookup(const struct fg_tokenizer *t, const char *token);

/* Ids of the special roles, or -1 when there is none: as the folder's
 * special_tokens_map.json / tokenizer_config.json name them, else GPT-2's
 * default <|endoftext|> for bos, eos and unk. */
int32_t fg_tokenizer_bos_id(const struct fg_tokenizer *t);
int32_t fg_tokenizer_eos_id(const struct fg_tokenizer *t);
int32_t fg_tokenizer_unk_id(const struct fg_tokenizer *t);
int32_t fg_tokenizer_pad_id(const struct fg_tokenizer *t);

enum fg_tok_bos { FG_TOK_BOS_UNSAID = -1, FG_TOK_BOS_NONE = 0, FG_TOK_BOS_ADD = 1 };
/* Does encoding a text "with special tokens" put bos first, as Hugging
 * Face's tokenizer for this folder does?  UNSAID when the files say nothing
 * (then the model family's default applies).  ADD means bos_id (>= 0) goes
 * first; fg_tokenizer_encode itself never adds it: the caller prepends it
 * to a text's ids, and takes token-id prompts as given.  The rules, and
 * what transformers was seen to do, are in core/tokenizer/special.c. */
enum fg_tok_bos fg_tokenizer_bos_rule(const struct fg_tokenizer *t);

#endif
