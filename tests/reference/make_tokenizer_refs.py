#!/usr/bin/env python3
"""Build tests/data/tokenizer/*: small tokenizer.json files in the forms that
SentencePiece-style checkpoints ship (a Metaspace pre-tokenizer and decoder;
a Unigram model or a BPE one) and Hugging Face tokenizers' own ids and
decoded texts for them (golden.json).

Training is not fully deterministic in tokenizers (pieces of equal score come
out in varying order), so a rerun writes a different but equally valid set:
commit the tokenizer.json files and golden.json files of one run together.
The tests read whatever is committed.

Only the making of the data needs Python and the `tokenizers` library (the
files were made with 0.23.3); the files are committed and the engine and its
tests never run this script.

  python3 tests/reference/make_tokenizer_refs.py [out_dir]
      (default tests/data/tokenizer)

Each folder holds tokenizer.json and golden.json:
  {"tokenizers": version, "cases": [{"text", "ids", "decoded"}],
   "random": [{"text", "ids", "decoded"}]}
with ids = Tokenizer.encode(text, add_special_tokens=False).ids and
decoded = Tokenizer.decode(ids, skip_special_tokens=False).  "cases" are
written by hand (ASCII, multi-byte UTF-8, emoji, spaces at the start, end and
in runs, newlines, tabs, characters the vocabulary lacks, the special tokens,
the empty text); "random" are 200 texts drawn from a fixed seed over a mixed
alphabet.

The folders:
  unigram-metaspace     Unigram trained by tokenizers' UnigramTrainer (asked
                        for 512 pieces, it kept 389; unk_id 0), NFKC,
                        Metaspace (prepend_scheme "always", split), Metaspace
                        decoder.
  unigram-bytefallback  the same pieces plus <0x00>..<0xFF> (score 0, as
                        SentencePiece gives byte pieces) and byte_fallback;
                        normalizer Sequence[Strip, Replace(" {2,}" -> " ")];
                        Metaspace prepend_scheme "first", no split; decoder
                        Sequence[ByteFallback, Metaspace].
  bpe-metaspace-legacy  BPE trained by BpeTrainer (400 tokens, unk "<unk>",
                        fuse_unk), with the older Metaspace form
                        {"add_prefix_space": true, "str_rep": ...} as both
                        pre-tokenizer and decoder.
  bpe-metaspace-first   the same BPE with Metaspace prepend_scheme "first".
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Regex

SEED = 20261207
SPECIALS = ["<unk>", "<s>", "</s>"]

# The training text: plain English plus a little of other scripts, so that
# some multi-byte characters are pieces and others (the test texts' ☃, ∰,
# 𝔘, emoji ...) are not.
WORDS = (
    "the quick brown fox jumps over the lazy dog while a tokenizer splits text into "
    "pieces and every piece has a score that is its log probability under the model "
    "engines read files written by other programs so each field is checked before use "
    "hello world this is a test of the metaspace pre tokenizer and the unigram model "
    "numbers like 12 345 6789 and dates 2026 12 07 appear in documents too "
    "café naïve résumé über straße déjà vu "
).split()
OTHER = ["日本語", "東京", "中文", "こんにちは", "Привет", "мир", "αβγ"]


def corpus():
    rng = random.Random(SEED)
    lines = []
    for _ in range(3000):
        n = rng.randint(3, 14)
        ws = [rng.choice(WORDS) if rng.random() < 0.93 else rng.choice(OTHER) for _ in range(n)]
        line = " ".join(ws)
        if rng.random() < 0.3:
            line = line.capitalize() + "."
        if rng.random() < 0.1:
            line += ", " + rng.choice(WORDS) + "!"
        lines.append(line)
    return lines


CASES = [
    "",
    "Hello world",
    "the quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "  two  spaces  between  ",
    "   ",
    " ",
    "x",
    "\n",
    "line one\nline two\n",
    "\ttab\tseparated\t",
    "mixed \t \n whitespace",
    "héllo wörld, café naïve",
    "日本語のテキスト 東京",
    "emoji 😀🎉 done",
    "ﬁne Ｆｕｌｌｗｉｄｔｈ ①②",
    "unknown ☃ ∰ 𝔘 here",
    "☃☃☃",
    "∰x∰",
    "<s> special </s> tokens",
    "a<s>b</s>c",
    "<s>",
    "▁ literal meta ▁▁ chars",
    "numbers 12 345 6789",
    "<0x41> looks like a byte token",
    "ends with newline\n",
    "e\u0301 combining",
    "Straße über déjà-vu",
]

ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + [" ", " ", " ", "  ", "\n", "\t", ".", ",", "!", "-", "'"]
    + ["é", "ü", "ß", "日", "本", "東", "中", "Я", "α", "☃", "∰", "𝔘", "😀", "🎉",
       "ﬁ", "Ａ", "①", "\u0301", "\u00a0", "\u3000", "▁", "<s>", "</s>", "<unk>", "<0x41>"]
    + ["the ", " quick", "hello", " world", "piece", "café"]
)


def random_texts(n):
    rng = random.Random(SEED + 1)
    out = []
    for _ in range(n):
        k = rng.randint(0, 14)
        out.append("".join(rng.choice(ALPHABET) for _ in range(k)))
    return out


def train_unigram():
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=512, special_tokens=SPECIALS, unk_token="<unk>",
                                      max_piece_length=12, shrinking_factor=0.75,
                                      n_sub_iterations=2)
    tok.train_from_iterator(corpus(), trainer)
    return json.loads(tok.to_str())


def train_bpe():
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, limit_alphabet=60)
    tok.train_from_iterator(corpus(), trainer)
    return json.loads(tok.to_str())


def unigram_bytefallback(base):
    j = json.loads(json.dumps(base))
    vocab = j["model"]["vocab"]
    specials, rest = vocab[:3], vocab[3:]
    assert [p for p, _ in specials] == SPECIALS
    j["model"]["vocab"] = specials + [["<0x%02X>" % b, 0.0] for b in range(256)] + rest
    j["model"]["byte_fallback"] = True
    # added_tokens keep their ids (0, 1, 2)
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}]}
    return j


def bpe_legacy(base):
    j = json.loads(json.dumps(base))
    old = {"type": "Metaspace", "replacement": "▁", "str_rep": "▁", "add_prefix_space": True}
    j["pre_tokenizer"] = dict(old)
    j["decoder"] = dict(old)
    return j


def bpe_first(base):
    j = json.loads(json.dumps(base))
    ms = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}
    j["pre_tokenizer"] = dict(ms)
    j["decoder"] = dict(ms)
    return j


def write(out, name, j):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    text = json.dumps(j, ensure_ascii=False, indent=None, separators=(",", ":"))
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    # The references come from the file as written, loaded back.
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))

    def ref(t):
        ids = tok.encode(t, add_special_tokens=False).ids
        return {"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}

    golden = {"tokenizers": tokenizers.__version__, "made_by": "tests/reference/make_tokenizer_refs.py",
              "cases": [ref(t) for t in CASES], "random": [ref(t) for t in random_texts(200)]}
    with open(os.path.join(d, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    for fn in ("tokenizer.json", "golden.json"):
        size = os.path.getsize(os.path.join(d, fn))
        assert size < 100_000, (name, fn, size)
        print(f"{name}/{fn}: {size} bytes")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer")
    uni = train_unigram()
    bpe = train_bpe()
    write(out, "unigram-metaspace", uni)
    write(out, "unigram-bytefallback", unigram_bytefallback(uni))
    write(out, "bpe-metaspace-legacy", bpe_legacy(bpe))
    write(out, "bpe-metaspace-first", bpe_first(bpe))


if __name__ == "__main__":
    main()
