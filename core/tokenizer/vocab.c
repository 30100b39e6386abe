/* core/tokenizer/vocab.c - load and validate vocab.json and merges.txt (and
 * the vocabulary and merges of a tokenizer.json, through the same helpers). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/error.h"

/* GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves; the other 68 bytes, in increasing order,
 * take U+0100, U+0101, ... so that every token is printable text. */
uint32_t fg_bytelevel_cp(unsigned char b)
{
	if (b <= 0x20)
		return 0x100u + b;			/* U+0100..U+0120 */
	if (b >= 0x7F && b <= 0xA0)
		return 0x100u + 33 + (b - 0x7Fu);	/* U+0121..U+0142 */
	if (b == 0xAD)
		return 0x143;
	return b;
}

int fg_bytelevel_byte(uint32_t cp)
{
	if (cp <= 0xFF)
		return (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) ? -1 : (int)cp;
	if (cp <= 0x120)
		return (int)(cp - 0x100);
	if (cp <= 0x142)
		return (int)(cp - 0x100 - 33 + 0x7F);
	if (cp == 0x143)
		return 0xAD;
	return -1;
}

const char *fg_tok_quote(const char *s, size_t len, char *out, size_t outsz)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i = 0;

	/* Control bytes, quotes and invalid UTF-8 become \xNN: the message
	 * stays one line of valid text. */
	while (i < len && o + 8 < outsz) {
		unsigned char c = (unsigned char)s[i];
		uint32_t cp;
		size_t n = fg_utf8_next((const unsigned char *)s + i, len - i, &cp);

		if (cp == FG_UC_INVALID || c < 0x20 || c == 0x7F || c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
			i++;
		} else {
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
		}
	}
	if (i < len && o + 3 < outsz) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return out;
}

int fg_tok_read_file(const char *path, char **buf, size_t *len, bool optional)
{
	struct stat st;
	size_t got = 0;
	char *b;
	int fd, err;

	/* O_NONBLOCK: a FIFO in the file's place must not hang open(2). */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		err = errno;
		if (!(optional && err == ENOENT))
			FG_ERR("%s: cannot open: %s", path, strerror(err));
		return -err;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		FG_ERR("%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > FG_TOK_MAX_FILE_BYTES) {
		FG_ERR("%s: %lld bytes is over the tokenizer's %u MiB limit per file", path,
		       (long long)st.st_size, FG_TOK_MAX_FILE_BYTES >> 20);
		close(fd);
		return -EINVAL;
	}
	b = malloc((size_t)st.st_size + 1);
	if (!b) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			FG_ERR("%s: read failed at offset %zu: %s", path, got,
			       r < 0 ? strerror(errno) : "file shrank while reading");
			free(b);
			close(fd);
			return -EIO;
		}
		got += (size_t)r;
	}
	close(fd);
	b[got] = '\0';
	*buf = b;
	*len = got;
	return 0;
}

int fg_tok_blob_add(struct fg_tokenizer *t, const char *s, size_t len, uint32_t *off)
{
	if (len >= UINT32_MAX - 1 - t->blob_len)
		return -ENOMEM;
	if (t->blob_len + len + 1 > t->blob_cap) {
		size_t cap = t->blob_cap ? t->blob_cap : 4096;
		char *nb;

		while (cap < t->blob_len + len + 1)
			cap *= 2;
		nb = realloc(t->blob, cap);
		if (!nb)
			return -ENOMEM;
		t->blob = nb;
		t->blob_cap = cap;
	}
	memcpy(t->blob + t->blob_len, s, len);
	t->blob[t->blob_len + len] = '\0';
	*off = (uint32_t)t->blob_len;
	t->blob_len += len + 1;
	return 0;
}

int fg_tok_grow_ids(struct fg_tokenizer *t, size_t n)
{
	struct fg_tok_str *text, *bytes;

	if (n <= t->n_ids)
		return 0;
	text = realloc(t->text, n * sizeof(*text));
	if (!text)
		return -ENOMEM;
	t->text = text;
	bytes = realloc(t->bytes, n * sizeof(*bytes));
	if (!bytes)
		return -ENOMEM;
	t->bytes = bytes;
	for (size_t i = t->n_ids; i < n; i++) {
		text[i] = (struct fg_tok_str){ 0, UINT32_MAX };
		bytes[i] = (struct fg_tok_str){ 0, UINT32_MAX };
	}
	t->n_ids = n;
	return 0;
}

/* The bytes a vocab token stands for: each character mapped back through the
 * byte-level alphabet; a token with characters outside it (a special token
 * stored verbatim) stands for its own UTF-8 text. */
size_t fg_bytelevel_to_bytes(const char *s, size_t len, char *out)
{
	size_t i = 0, o = 0;

	while (i < len) {
		uint32_t cp;
		size_t n = fg_utf8_next((const unsigned char *)s + i, len - i, &cp);
		int b = cp == FG_UC_INVALID ? -1 : fg_bytelevel_byte(cp);

		if (b < 0) {
			memcpy(out, s, len);
			return len;
		}
		out[o++] = (char)b;
		i += n;
	}
	return o;
}

int fg_tok_load_vocab_obj(struct fg_tokenizer *t, const char *path, const char *what,
			  json_t *root, bool byte_level)
{
	char q[96], q2[96], where[4200];
	const char *key;
	json_t *val;
	char *dec = NULL;
	size_t n;
	int rc = -EINVAL;

	/* vocab.json's messages name the file alone, as they always have. */
	if (!strcmp(what, "vocab.json"))
		snprintf(where, sizeof(where), "%s", path);
	else
		snprintf(where, sizeof(where), "%s: %s", path, what);
	if (!json_is_object(root)) {
		FG_ERR("%s: %s is not a JSON object; expected {\"token\": id, ...}", where,
		       strcmp(what, "vocab.json") ? "it" : "the top level");
		return -EINVAL;
	}
	n = json_object_size(root);
	if (n < (byte_level ? 256u : 1u) || n > FG_TOK_MAX_VOCAB) {
		FG_ERR("%s: %zu tokens; a %s vocabulary has between %u and %u", where, n,
		       byte_level ? "byte-level BPE" : "BPE", byte_level ? 256u : 1u,
		       FG_TOK_MAX_VOCAB);
		return -EINVAL;
	}
	rc = fg_tok_grow_ids(t, n);
	if (rc)
		return rc;
	t->n_vocab = n;
	rc = -ENOMEM;
	dec = malloc(FG_TOK_MAX_TOKEN_BYTES);
	if (!dec)
		goto out;
	json_object_foreach(root, key, val) {
		size_t klen = strlen(key), dlen;
		json_int_t id;

		rc = -EINVAL;
		fg_tok_quote(key, klen, q, sizeof(q));
		if (!json_is_integer(val)) {
			FG_ERR("%s: key \"%s\": the id is not an integer", where, q);
			goto out;
		}
		id = json_integer_value(val);
		if (id < 0 || (uint64_t)id >= n) {
			FG_ERR("%s: key \"%s\": id %lld is out of range 0..%zu (ids must number "
			       "the %zu tokens from 0)", where, q, (long long)id, n - 1, n);
			goto out;
		}
		if (t->text[id].len != UINT32_MAX) {
			FG_ERR("%s: key \"%s\": id %lld is already the id of \"%s\"", where, q,
			       (long long)id, fg_tok_quote(t->blob + t->text[id].off,
							    t->text[id].len, q2, sizeof(q2)));
			goto out;
		}
		if (klen == 0 || klen > FG_TOK_MAX_TOKEN_BYTES) {
			FG_ERR("%s: key \"%s\" (id %lld): a token must have 1 to %u bytes", where, q,
			       (long long)id, FG_TOK_MAX_TOKEN_BYTES);
			goto out;
		}
		rc = fg_tok_blob_add(t, key, klen, &t->text[id].off);
		if (rc)
			goto out;
		t->text[id].len = (uint32_t)klen;
		if (byte_level) {
			dlen = fg_bytelevel_to_bytes(key, klen, dec);
			rc = fg_tok_blob_add(t, dec, dlen, &t->bytes[id].off);
			if (rc)
				goto out;
			t->bytes[id].len = (uint32_t)dlen;
		} else {
			t->bytes[id] = t->text[id];	/* set by the decoders later */
		}
	}
	rc = fg_strmap_init(&t->vocab, n);
	for (size_t id = 0; !rc && id < n; id++)
		rc = fg_strmap_insert(t, (int32_t)id);
out:
	free(dec);
	return rc;
}

int fg_tok_byte_ids(struct fg_tokenizer *t, const char *path)
{
	for (int b = 0; b < 256; b++) {
		char ch[4];
		uint32_t cp = fg_bytelevel_cp((unsigned char)b);
		size_t cl = cp < 0x80 ? 1 : 2;	/* the alphabet ends at U+0143 */

		if (cl == 1) {
			ch[0] = (char)cp;
		} else {
			ch[0] = (char)(0xC0 | cp >> 6);
			ch[1] = (char)(0x80 | (cp & 0x3F));
		}
		t->byte_id[b] = fg_strmap_find(t, ch, cl);
		if (t->byte_id[b] < 0 || (size_t)t->byte_id[b] >= t->n_vocab) {
			FG_ERR("%s: no token for byte 0x%02x (U+%04X); not a byte-level BPE "
			       "vocabulary", path, b, (unsigned)cp);
			return -EINVAL;
		}
	}
	return 0;
}

int fg_tok_read_json(const char *path, bool optional, size_t flags, const char *expected,
		     json_t **root)
{
	json_error_t jerr;
	char *buf;
	size_t len;
	int rc;

	*root = NULL;
	rc = fg_tok_read_file(path, &buf, &len, optional);
	if (rc)
		return rc;
	*root = json_loadb(buf, len, flags, &jerr);
	free(buf);
	if (!*root) {
		FG_ERR("%s:%d:%d: not valid JSON (%s)%s", path, jerr.line, jerr.column, jerr.text,
		       expected);
		return -EINVAL;
	}
	return 0;
}

static int load_vocab(struct fg_tokenizer *t, const char *path)
{
	json_t *root;
	int rc;

	rc = fg_tok_read_json(path, false, JSON_REJECT_DUPLICATES, "; expected a GPT-2 BPE vocab.json",
			      &root);
	if (rc)
		return rc;
	rc = fg_tok_load_vocab_obj(t, path, "vocab.json", root, true);
	if (!rc)
		rc = fg_tok_byte_ids(t, path);
	json_decref(root);
	return rc;
}

static int merge_error(const char *where, const char *what, const char *s, size_t len)
{
	char q[96];

	FG_ERR("%s: %s \"%s\"", where, what, fg_tok_quote(s, len, q, sizeof(q)));
	return -EINVAL;
}

int fg_tok_add_merge(struct fg_tokenizer *t, const char *where, const char *vocab_name,
		     const char *a, size_t alen, const char *b, size_t blen, uint32_t rank,
		     char *cat)
{
	char what[64];
	int32_t ia, ib, m;

	snprintf(what, sizeof(what), "not in %s: token", vocab_name);
	ia = fg_strmap_find(t, a, alen);
	if (ia < 0 || (size_t)ia >= t->n_vocab)
		return merge_error(where, what, a, alen);
	ib = fg_strmap_find(t, b, blen);
	if (ib < 0 || (size_t)ib >= t->n_vocab)
		return merge_error(where, what, b, blen);
	if (alen + blen > FG_TOK_MAX_TOKEN_BYTES)
		return merge_error(where, "merged token too long:", a, alen);
	memcpy(cat, a, alen);
	memcpy(cat + alen, b, blen);
	m = fg_strmap_find(t, cat, alen + blen);
	if (m < 0 || (size_t)m >= t->n_vocab) {
		snprintf(what, sizeof(what), "not in %s: merged token", vocab_name);
		return merge_error(where, what, cat, alen + blen);
	}
	/* As in Hugging Face, a pair listed twice keeps its later rank. */
	fg_pairmap_set(&t->merges, ia, ib, rank, m);
	return 0;
}

static int load_merges(struct fg_tokenizer *t, const char *path)
{
	char *buf, *cat = NULL, where[4200];
	size_t len, lines = 1, lineno = 0, pos = 0;
	uint32_t rank = 0;
	int rc;

	rc = fg_tok_read_file(path, &buf, &len, false);
	if (rc)
		return rc;
	for (size_t i = 0; i < len; i++)
		lines += buf[i] == '\n';
	rc = -EINVAL;
	if (lines > (size_t)FG_TOK_MAX_MERGES + 2) {
		FG_ERR("%s: %zu lines; at most %u merges are supported", path, lines,
		       FG_TOK_MAX_MERGES);
		goto out;
	}
	rc = fg_pairmap_init(&t->merges, lines);
	if (rc)
		goto out;
	rc = -ENOMEM;
	cat = malloc(FG_TOK_MAX_TOKEN_BYTES);
	if (!cat)
		goto out;
	while (pos < len) {
		char *s = buf + pos, *nl = memchr(s, '\n', len - pos), *sp;
		size_t n = nl ? (size_t)(nl - s) : len - pos;

		pos += n + 1;
		lineno++;
		if (n && s[n - 1] == '\r')
			n--;
		if (n == 0 || (lineno == 1 && n >= 8 && !memcmp(s, "#version", 8)))
			continue;
		sp = memchr(s, ' ', n);
		if (!sp || sp == s || sp == s + n - 1 ||
		    memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1)) {
			snprintf(where, sizeof(where), "%s:%zu", path, lineno);
			rc = merge_error(where, "expected two tokens separated by one space, got",
					 s, n);
			goto out;
		}
		snprintf(where, sizeof(where), "%s:%zu", path, lineno);
		rc = fg_tok_add_merge(t, where, "vocab.json", s, (size_t)(sp - s), sp + 1,
				      n - (size_t)(sp - s) - 1, rank++, cat);
		if (rc)
			goto out;
	}
	rc = 0;
out:
	free(cat);
	free(buf);
	return rc;
}

int fg_tok_load_bpe(const char *vocab_json, const char *merges_txt, struct fg_tokenizer **out)
{
	struct fg_tokenizer *t;
	int rc;

	*out = NULL;
	t = fg_tok_new();
	if (!t)
		return -ENOMEM;
	rc = load_vocab(t, vocab_json);
	if (!rc)
		rc = load_merges(t, merges_txt);
	if (rc) {
		if (rc == -ENOMEM)
			FG_ERR("%s: out of memory loading the tokenizer", vocab_json);
		fg_tokenizer_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

struct fg_tokenizer *fg_tok_new(void)
{
	struct fg_tokenizer *t = calloc(1, sizeof(*t));

	if (t) {
		t->bos = t->eos = t->unk = t->pad = -1;
		t->bos_rule = FG_TOK_BOS_UNSAID;
	}
	return t;
}

int fg_tokenizer_load(const char *vocab_json, const char *merges_txt, struct fg_tokenizer **out)
{
	int rc;

	if (!vocab_json || !merges_txt || !out)
		return -EINVAL;
	rc = fg_tok_load_bpe(vocab_json, merges_txt, out);
	if (rc)
		return rc;
	rc = fg_tok_load_special(*out, NULL, NULL);
	if (!rc)
		rc = fg_tok_build_added(*out, NULL);
	if (rc) {
		fg_tokenizer_free(*out);
		*out = NULL;
	}
	return rc;
}

void fg_tokenizer_free(struct fg_tokenizer *t)
{
	if (!t)
		return;
	fg_strmap_free(&t->vocab);
	fg_pairmap_free(&t->merges);
	fg_tok_pipeline_free(t->pipe);
	free(t->added.v);
	free(t->added_norm.v);
	free(t->pend);
	free(t->text);
	free(t->bytes);
	free(t->blob);
	free(t);
}
