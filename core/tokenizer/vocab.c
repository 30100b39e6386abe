/* core/tokenizer/vocab.c - load and validate vocab.json and merges.txt. */
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

	fd = open(path, O_RDONLY | O_CLOEXEC);
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
static size_t token_to_bytes(const char *s, size_t len, char *out)
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

static int load_vocab(struct fg_tokenizer *t, const char *path)
{
	char q[96], q2[96];
	json_error_t jerr;
	const char *key;
	json_t *root, *val;
	char *buf, *dec = NULL;
	size_t len, n;
	int rc;

	rc = fg_tok_read_file(path, &buf, &len, false);
	if (rc)
		return rc;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!root) {
		FG_ERR("%s:%d:%d: not valid JSON (%s); expected a GPT-2 BPE vocab.json", path,
		       jerr.line, jerr.column, jerr.text);
		return -EINVAL;
	}
	rc = -EINVAL;
	if (!json_is_object(root)) {
		FG_ERR("%s: the top level is not a JSON object; expected {\"token\": id, ...}",
		       path);
		goto out;
	}
	n = json_object_size(root);
	if (n < 256 || n > FG_TOK_MAX_VOCAB) {
		FG_ERR("%s: %zu tokens; a byte-level BPE vocabulary has between 256 and %u", path,
		       n, FG_TOK_MAX_VOCAB);
		goto out;
	}
	rc = fg_tok_grow_ids(t, n);
	if (rc)
		goto out;
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
			FG_ERR("%s: key \"%s\": the id is not an integer", path, q);
			goto out;
		}
		id = json_integer_value(val);
		if (id < 0 || (uint64_t)id >= n) {
			FG_ERR("%s: key \"%s\": id %lld is out of range 0..%zu (ids must number "
			       "the %zu tokens from 0)", path, q, (long long)id, n - 1, n);
			goto out;
		}
		if (t->text[id].len != UINT32_MAX) {
			FG_ERR("%s: key \"%s\": id %lld is already the id of \"%s\"", path, q,
			       (long long)id, fg_tok_quote(t->blob + t->text[id].off,
							    t->text[id].len, q2, sizeof(q2)));
			goto out;
		}
		if (klen == 0 || klen > FG_TOK_MAX_TOKEN_BYTES) {
			FG_ERR("%s: key \"%s\" (id %lld): a token must have 1 to %u bytes", path, q,
			       (long long)id, FG_TOK_MAX_TOKEN_BYTES);
			goto out;
		}
		rc = fg_tok_blob_add(t, key, klen, &t->text[id].off);
		if (rc)
			goto out;
		t->text[id].len = (uint32_t)klen;
		dlen = token_to_bytes(key, klen, dec);
		rc = fg_tok_blob_add(t, dec, dlen, &t->bytes[id].off);
		if (rc)
			goto out;
		t->bytes[id].len = (uint32_t)dlen;
	}
	rc = fg_strmap_init(&t->vocab, n);
	for (size_t id = 0; !rc && id < n; id++)
		rc = fg_strmap_insert(t, (int32_t)id);
	if (rc)
		goto out;
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
		if (t->byte_id[b] < 0) {
			FG_ERR("%s: no token for byte 0x%02x (U+%04X); not a byte-level BPE "
			       "vocabulary", path, b, (unsigned)cp);
			rc = -EINVAL;
			goto out;
		}
	}
	rc = 0;
out:
	free(dec);
	json_decref(root);
	return rc;
}

static int merge_error(const char *path, size_t line, const char *what, const char *s, size_t len)
{
	char q[96];

	FG_ERR("%s:%zu: %s \"%s\"", path, line, what, fg_tok_quote(s, len, q, sizeof(q)));
	return -EINVAL;
}

static int load_merges(struct fg_tokenizer *t, const char *path)
{
	char *buf, *cat = NULL;
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
		int32_t a, b, m;

		pos += n + 1;
		lineno++;
		if (n && s[n - 1] == '\r')
			n--;
		if (n == 0 || (lineno == 1 && n >= 8 && !memcmp(s, "#version", 8)))
			continue;
		sp = memchr(s, ' ', n);
		if (!sp || sp == s || sp == s + n - 1 ||
		    memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1)) {
			rc = merge_error(path, lineno, "expected two tokens separated by one "
					 "space, got", s, n);
			goto out;
		}
		a = fg_strmap_find(t, s, (size_t)(sp - s));
		if (a < 0) {
			rc = merge_error(path, lineno, "not in vocab.json: token", s,
					 (size_t)(sp - s));
			goto out;
		}
		b = fg_strmap_find(t, sp + 1, n - (size_t)(sp - s) - 1);
		if (b < 0) {
			rc = merge_error(path, lineno, "not in vocab.json: token", sp + 1,
					 n - (size_t)(sp - s) - 1);
			goto out;
		}
		if (n - 1 > FG_TOK_MAX_TOKEN_BYTES) {
			rc = merge_error(path, lineno, "merged token too long:", s, n);
			goto out;
		}
		memcpy(cat, s, (size_t)(sp - s));
		memcpy(cat + (sp - s), sp + 1, n - (size_t)(sp - s) - 1);
		m = fg_strmap_find(t, cat, n - 1);
		if (m < 0) {
			rc = merge_error(path, lineno, "not in vocab.json: merged token", cat, n - 1);
			goto out;
		}
		/* As in Hugging Face, a pair listed twice keeps its later rank. */
		fg_pairmap_set(&t->merges, a, b, rank++, m);
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
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->bos = t->eos = t->unk = t->pad = -1;
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

int fg_tokenizer_load(const char *vocab_json, const char *merges_txt, struct fg_tokenizer **out)
{
	int rc;

	if (!vocab_json || !merges_txt || !out)
		return -EINVAL;
	rc = fg_tok_load_bpe(vocab_json, merges_txt, out);
	if (rc)
		return rc;
	rc = fg_tok_load_special(*out, NULL);
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
	free(t->special);
	free(t->text);
	free(t->bytes);
	free(t->blob);
	free(t);
}
