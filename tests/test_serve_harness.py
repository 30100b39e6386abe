#!/usr/bin/env python3
"""tests/test_serve_harness.py - the evaluation harnesses' protocol against
`fgcore serve`, on the trained opt-py-128x4.

Replays the requests lm-evaluation-harness (local-completions, its remote
tokenizer) and HELM (OpenAILegacyCompletionsClient) send, parses the answers
the way they do, and checks what they would compute against the Hugging Face
references in $FGCORE_TESTDATA (heldout.json's log-probabilities, golden.json's
tokenization, greedy tokens, top-5 logits and last prefill logits).  Also: the
tokenizer endpoints and malformed bodies for them, log-probabilities in a
stream, that max_tokens 1 with echo costs no more than a scored prefill, and
lm-eval's multiple-choice requests on a server sharing prompt prefixes.
Neither harness is imported: the shapes are written out here, as their
sources (lm-eval 0.4.13, crfm-helm 0.5.16) build them.  Servers, skips and
the watchdog are tests/test_serve.py's."""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import test_serve as ts  # noqa: E402 (exits 77 when FGCORE_TESTDATA is unset)

check, fail, NAME = ts.check, ts.fail, ts.NAME
TOL = 1e-3  # per-token log-probability, fp32 path (testdata/README.md)


def post(s, path, body):
    """(status, parsed answer or raw bytes) of a POST to path."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    st, raw, _ = s.request("POST", path, data, {"Content-Type": "application/json"})
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, raw


def tokenize(s, text, special=None):
    body = {"prompt": text} if special is None else {"prompt": text, "add_special_tokens": special}
    st, o = post(s, "/tokenize", body)
    check(st == 200, f"/tokenize {text[:40]!r}: {st} {str(o)[:200]}")
    return o["tokens"] if st == 200 else []


def detokenize(s, ids):
    st, o = post(s, "/detokenize", {"tokens": ids})
    check(st == 200, f"/detokenize: {st} {str(o)[:200]}")
    return o["prompt"] if st == 200 else ""


def golden_prompts(golden):
    """Each golden row's prompt ids as Hugging Face tokenized its text (bos
    first), left padding removed."""
    return [[t for t, m in zip(ids, mask) if m]
            for ids, mask in zip(golden["input_ids"], golden["attention_mask"])]


def log_softmax(row):
    top = max(row)
    lse = top + math.log(sum(math.exp(x - top) for x in row))
    return [x - lse for x in row]


def prefill_logits(golden):
    """golden_prefill_last_logits.f32: [rows, vocab] float32 little-endian."""
    import array
    meta = golden["prefill_last_logits"]
    a = array.array("f")
    with open(os.path.join(ts.MODEL, meta["file"]), "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    rows, vocab = meta["shape"]
    return [a[r * vocab:(r + 1) * vocab].tolist() for r in range(rows)]


# ---- the tokenizer endpoints (lm-eval's RemoteTokenizer, vLLM's shapes) ------------------


def test_tokenizer(s, golden, heldout, config):
    st, info = s.get("/tokenizer_info")
    if not check(st == 200, f"/tokenizer_info: {st} {info[:200]!r}"):
        return
    info = json.loads(info)
    # lm-eval's check_remote_tokenizer_support: an object with eos_token, and
    # /tokenize answering tokens for {"prompt": "test", "add_special_tokens": false}
    check(isinstance(info, dict) and isinstance(info.get("eos_token"), str), f"info: {info}")
    check(isinstance(tokenize(s, "test", False), list), "/tokenize of 'test'")
    # its eos_token_id / bos_token_id: the first id of encoding the token's text
    # (Hugging Face's GPT2Tokenizer for this folder: <|endoftext|> = 8191, no pad)
    eos = tokenize(s, info["eos_token"], False)
    check(eos[:1] == [config["eos_token_id"]] and len(eos) == 1, f"eos_token encodes to {eos}")
    bos = tokenize(s, info["bos_token"], False)
    check(bos[:1] == [config["bos_token_id"]], f"bos_token encodes to {bos}")
    check(info.get("pad_token") is None, f"pad_token {info.get('pad_token')!r}: the tokenizer names none")
    check(info.get("model_max_length") == config["max_position_embeddings"], f"info: {info}")
    check(info.get("add_bos_token") is True and isinstance(info.get("tokenizer_class"), str),
          f"info: {info}")

    # golden.json's prompt ids: Hugging Face's tokenization of its texts behind
    # the bos the reference fed the model (OPT's rule; this folder's files say
    # nothing, so the family's default holds)
    for text, ids in zip(golden["prompt_texts"], golden_prompts(golden)):
        st, o = post(s, "/tokenize", {"model": NAME, "prompt": text, "add_special_tokens": True})
        if check(st == 200, f"/tokenize: {st} {o}"):
            check(o["tokens"] == ids and o["count"] == len(ids), f"{text!r}: {o['tokens']} != {ids}")
            check(o["max_model_len"] == config["max_position_embeddings"], f"max_model_len {o}")
        check(tokenize(s, text) == ids, "add_special_tokens defaults to true (vLLM)")
        check(tokenize(s, text, False) == ids[1:], f"{text!r} without special tokens")
    # and its decoding of the greedy tokens
    for ids, text in zip(golden["greedy_new_tokens"], golden["greedy_texts"]):
        got = detokenize(s, ids)
        check(got == text, f"/detokenize {ids[:8]}...: {got!r} != {text!r}")
    # the same ids as `fgcore tokenize`, on texts that are hard to tokenize
    texts = ["héllo wörld", "tab\tand  two  spaces\n\n", "emoji 🎉 and 你好", "<|endoftext|>x", "",
             " leading", "1234567 digits"]
    cli = subprocess.run([ts.FG, *ts.CONFIG, "tokenize", *texts[:4], texts[5], texts[6]],
                         capture_output=True, text=True, timeout=60)
    if check(cli.returncode == 0, f"fgcore tokenize: {cli.stderr}"):
        want = [json.loads(line) for line in cli.stdout.splitlines()]
        got = [tokenize(s, t, False) for t in texts[:4] + texts[5:]]
        check(got == want, f"/tokenize vs fgcore tokenize: {got} != {want}")
    check(tokenize(s, "", False) == [] and tokenize(s, "", True) == [config["bos_token_id"]],
          "an empty text")
    for t in texts:
        check(detokenize(s, tokenize(s, t, False)) == t, f"round trip of {t!r}")
    check(detokenize(s, []) == "", "/detokenize of no ids")
    # held-out ids, decoded and read again: the same ids (used by the HELM test)
    for ids in heldout["input_ids"][:4]:
        check(tokenize(s, detokenize(s, ids[1:])) == ids, "held-out text round trip")


def test_tokenizer_malformed(s):
    def refused(path, body, status, code, param, what):
        st, o = post(s, path, body)
        ok = check(st == status, f"{what}: status {st}, want {status}: {str(o)[:200]}")
        if ok and isinstance(o, dict) and "error" in o:
            e = o["error"]
            check(e.get("code") == code and e.get("param") == param,
                  f"{what}: code/param {e.get('code')}/{e.get('param')}, want {code}/{param}")
            check(isinstance(e.get("message"), str) and "\n" not in e["message"]
                  and 10 < len(e["message"]) < 400, f"{what}: message {e.get('message')!r}")
        elif ok:
            fail(f"{what}: no error object: {o!r}")
        check(s.get("/health")[0] == 200, f"server stopped serving after {what}")

    bad = "invalid_value"
    refused("/tokenize", b'{"prompt": "x"', 400, "invalid_json", None, "bad JSON")
    refused("/tokenize", b"", 400, "invalid_json", None, "an empty body")
    refused("/detokenize", b"\xff\xfe", 400, "invalid_json", None, "not UTF-8")
    refused("/tokenize", b'{"prompt": "a\\u0000b"}', 400, "invalid_json", None, "a NUL in the text")
    refused("/tokenize", b'{"prompt": "a", "prompt": "b"}', 400, "invalid_json", None,
            "a field twice")
    refused("/tokenize", [1], 400, bad, None, "an array body")
    refused("/tokenize", {}, 400, bad, "prompt", "no prompt")
    refused("/tokenize", {"prompt": None}, 400, bad, "prompt", "prompt null")
    refused("/tokenize", {"prompt": ["a", "b"]}, 400, bad, "prompt", "a list of prompts")
    refused("/tokenize", {"prompt": [1, 2]}, 400, bad, "prompt", "token ids to /tokenize")
    refused("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, 400, bad,
            "add_special_tokens", "add_special_tokens a string")
    refused("/tokenize", {"prompt": "x", "return_token_strs": True}, 400, bad,
            "return_token_strs", "return_token_strs")
    refused("/tokenize", {"messages": [{"role": "user", "content": "hi"}]}, 400, bad,
            "messages", "a chat")
    refused("/tokenize", {"prompt": "x", "tokens": [1]}, 400, bad, "tokens", "tokens to /tokenize")
    refused("/tokenize", {"prompt": "x", "model": 3}, 400, bad, "model", "model a number")
    refused("/tokenize", {"prompt": "x", "model": "gpt-17"}, 404, "model_not_found", "model",
            "an unknown model")
    refused("/detokenize", {}, 400, bad, "tokens", "no tokens")
    refused("/detokenize", {"tokens": "1 2"}, 400, bad, "tokens", "tokens a string")
    refused("/detokenize", {"tokens": [[1, 2]]}, 400, bad, "tokens", "nested tokens")
    refused("/detokenize", {"tokens": [1, -1]}, 400, bad, "tokens", "a negative id")
    refused("/detokenize", {"tokens": [1.5]}, 400, bad, "tokens", "a fractional id")
    refused("/detokenize", {"tokens": [True]}, 400, bad, "tokens", "a boolean id")
    refused("/detokenize", {"tokens": [2 ** 40]}, 400, bad, "tokens", "an id past int32")
    refused("/detokenize", {"tokens": [8192]}, 400, bad, "tokens", "an id past the vocabulary")
    refused("/detokenize", {"tokens": [1], "prompt": "x"}, 400, bad, "prompt",
            "prompt to /detokenize")
    for path, method, allow in (("/tokenize", "GET", "POST"), ("/detokenize", "PUT", "POST"),
                                ("/tokenizer_info", "POST", "GET, HEAD")):
        st, raw, r = s.request(method, path, b"{}", {"Content-Type": "application/json"})
        check(st == 405 and r.getheader("Allow") == allow and
              json.loads(raw)["error"]["code"] == "method_not_allowed",
              f"{method} {path}: {st} {r.getheader('Allow')} {raw[:200]!r}")
    check(s.request("HEAD", "/tokenizer_info")[0] == 200, "HEAD /tokenizer_info")
    check(s.request("GET", "/v1/tokenizer_info")[0] == 404, "vLLM serves them at the root only")
    # a large text: tokenized whole (lm-eval windows long documents itself)
    big = "def f(x):\n    return x + 1\n" * 20000
    st, o = post(s, "/tokenize", {"prompt": big, "add_special_tokens": False})
    check(st == 200 and o["count"] > o["max_model_len"], f"a 540 kB text: {st} {str(o)[:100]}")
    line = s.log_line(r'^fgcore: serve: POST /detokenize 400 .* reason="\\"tokens\\": token id 8192 '
                      r'is not in the model\'s vocabulary')
    check(line, "the access log gives a refused /detokenize's reason")


def test_no_tokenizer(tmp):
    """A model folder without tokenizer files: the tokenizer's endpoints say
    so with 404, which is what makes lm-eval's tokenizer_backend=auto fall back
    to its own tokenizer; token-id completions still run."""
    bare = os.path.join(tmp, "bare")
    os.makedirs(bare)
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(ts.MODEL, f), os.path.join(bare, f))
    s = ts.Server(config=["-o", f"model.path={bare}"])
    try:
        for path, body in (("/tokenizer_info", None), ("/tokenize", {"prompt": "x"}),
                           ("/detokenize", {"tokens": [1]})):
            st, o = post(s, path, body) if body else s.get(path)
            o = o if isinstance(o, dict) else json.loads(o)
            check(st == 404 and o["error"]["code"] == "no_tokenizer" and
                  "has no tokenizer" in o["error"]["message"], f"{path} without a tokenizer: {st} {o}")
        st, o = post(s, "/v1/completions", {"prompt": [8191, 4299], "max_tokens": 2})
        check(st == 200, f"token ids without a tokenizer: {st} {o}")
    finally:
        check(s.stop() == 0, "serve without a tokenizer did not exit 0")


# ---- lm-evaluation-harness: local-completions ----------------------------------------------


def lm_eval_body(inputs):
    """LocalCompletionsAPI._create_payload(generate=False) for a batch."""
    return {"model": NAME, "prompt": inputs, "temperature": 0, "max_tokens": 1, "logprobs": 1,
            "seed": 1234, "echo": True}


def lm_eval_parse(answer, ctxlens):
    """(log-likelihood, is_greedy) per prompt, read as parse_logprobs reads
    them: choices by index, token_logprobs[ctxlen:-1] summed, each compared
    with the largest value of its top_logprobs entry."""
    out = []
    choices = sorted(answer["choices"], key=lambda c: c["index"])
    for choice, ctxlen in zip(choices, ctxlens):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        out.append((sum(lps), all(lp == max(top.values()) for lp, top in zip(lps, tops))))
    return out


def test_lm_eval(s, heldout, golden):
    # loglikelihood of held-out continuations: 3 batches of 4 prompts, sent at once
    # (lm-eval's num_concurrent), each against Hugging Face's per-token values
    cases = []
    for i in range(12):
        ids = heldout["input_ids"][i]
        ctx, cont = 20 + 9 * i, 1 + (i * 7) % 12
        ref = sum(heldout["token_logprobs"][i][ctx - 1:ctx + cont - 1])
        cases.append((ids[:ctx + cont], ctx, ref, cont))
    batches = [cases[k:k + 4] for k in range(0, 12, 4)]
    with ThreadPoolExecutor(3) as ex:
        answers = list(ex.map(lambda b: post(s, "/v1/completions",
                                             lm_eval_body([c[0] for c in b])), batches))
    worst = 0.0
    for b, (st, o) in zip(batches, answers):
        if not check(st == 200, f"lm-eval loglikelihood batch: {st} {str(o)[:300]}"):
            continue
        check(o["usage"]["completion_tokens"] == len(b), f"one generated token per prompt: {o['usage']}")
        for (inp, ctx, ref, cont), (ll, _) in zip(b, lm_eval_parse(o, [c[1] for c in b])):
            worst = max(worst, abs(ll - ref) / cont)
            check(abs(ll - ref) <= TOL * cont, f"loglikelihood {ll} vs Hugging Face {ref} ({cont} tokens)")
    print(f"lm-eval loglikelihood of 12 held-out continuations: worst |diff| per token {worst:.2e}")

    # is_greedy against Hugging Face: each golden prompt, continued by its
    # reference greedy tokens (every top-1/top-2 margin of these steps is
    # above 0.04), is greedy; with the first token replaced by the
    # second most likely it is not, and scores Hugging Face's log-softmax of
    # the last prefill logits there
    prompts = golden_prompts(golden)
    logits = [log_softmax(row) for row in prefill_logits(golden)]
    steps = 8
    check(all(m > 10 * TOL for row in golden["greedy_top1_top2_margin"] for m in row[:steps]),
          "the greedy steps used here have clear margins")
    inputs, ctxlens, want = [], [], []
    for r, p in enumerate(prompts):
        greedy = golden["greedy_new_tokens"][r][:steps]
        second = golden["greedy_step_top5"]["rows"][r][0][1][0]
        inputs += [p + greedy, p + [greedy[0]], p + [second]]
        ctxlens += [len(p)] * 3
        want += [(None, True), (logits[r][greedy[0]], True), (logits[r][second], False)]
    st, o = post(s, "/v1/completions", lm_eval_body(inputs))
    if check(st == 200, f"lm-eval is_greedy batch: {st} {str(o)[:300]}"):
        got = lm_eval_parse(o, ctxlens)
        check(len(got) == len(want), f"{len(got)} answers for {len(want)} prompts")
        for k, ((ll, greedy), (ref, is_greedy)) in enumerate(zip(got, want)):
            check(greedy == is_greedy, f"prompt {k}: is_greedy {greedy}, Hugging Face: {is_greedy}")
            if ref is not None:
                check(abs(ll - ref) <= TOL, f"prompt {k}: {ll} vs Hugging Face {ref}")
        print(f"lm-eval is_greedy: {sum(g for _, g in got)} of {len(got)} greedy, as Hugging Face's")
    # top_logprobs at prompt positions (echo), 5 of them, against Hugging
    # Face's five largest logits at the same steps
    top5 = golden["greedy_step_top5"]["rows"]
    seqs = [p + golden["greedy_new_tokens"][r][:steps] for r, p in enumerate(prompts)]
    st, o = post(s, "/v1/completions", {**lm_eval_body(seqs), "logprobs": 5, "max_tokens": 0})
    if check(st == 200, f"echo with logprobs 5: {st} {str(o)[:300]}"):
        compared = 0
        for c in sorted(o["choices"], key=lambda c: c["index"]):
            p, tops = prompts[c["index"]], c["logprobs"]["top_logprobs"]
            for t in range(steps):
                compared += check_top5(s, tops[len(p) + t], top5[c["index"]][t],
                                       f"prompt {c['index']} position {len(p) + t}")
        check(compared >= 100, f"only {compared} prompt top_logprobs entries compared")
        print(f"echo: {compared} top_logprobs entries at prompt positions match Hugging Face's logits")
    # max_tokens 0: the same prompt entries, nothing generated
    st0, o0 = post(s, "/v1/completions", {**lm_eval_body(inputs[:3]), "max_tokens": 0})
    st1, o1 = post(s, "/v1/completions", lm_eval_body(inputs[:3]))
    if check(st0 == st1 == 200, f"max_tokens 0 / 1: {st0} {st1}"):
        for c0, c1 in zip(o0["choices"], o1["choices"]):
            check(c0["logprobs"]["token_logprobs"] == c1["logprobs"]["token_logprobs"][:-1],
                  "max_tokens 0 scores the prompt as max_tokens 1 does")
        check(o0["usage"]["completion_tokens"] == 0, f"max_tokens 0 usage {o0['usage']}")

    # generate_until: _create_payload(generate=True) with the task's until and eos
    gen = {"prompt": golden["prompt_texts"], "model": NAME, "max_tokens": 16, "temperature": 0,
           "stop": ["\n\n", "<|endoftext|>"], "seed": 1234}
    st, o = post(s, "/v1/completions", gen)
    if check(st == 200, f"lm-eval generate body: {st} {str(o)[:300]}"):
        texts = [None] * len(o["choices"])
        for c in o["choices"]:
            texts[c["index"]] = c["text"]
        for r, t in enumerate(texts):
            ref = detokenize(s, golden["greedy_new_tokens"][r][:16]).split("\n\n")[0]
            check(t == ref, f"greedy generation {r}: {t!r}, Hugging Face's {ref!r}")


# ---- HELM: OpenAILegacyCompletionsClient -----------------------------------------------------


def helm_request(prompt, temperature=1.0, num_completions=1, top_k_per_token=1, max_tokens=100,
                 stop_sequences=(), top_p=1, presence_penalty=0, frequency_penalty=0,
                 echo_prompt=False):
    """_to_raw_completion_request of a helm.common.request.Request (its
    defaults), best_of and logprobs raised to n as HELM raises them."""
    n = num_completions
    return {"model": NAME, "prompt": prompt, "temperature": temperature, "n": n,
            "max_tokens": max_tokens, "best_of": max(top_k_per_token, n),
            "logprobs": max(top_k_per_token, n), "stop": list(stop_sequences) or None,
            "top_p": top_p, "presence_penalty": presence_penalty,
            "frequency_penalty": frequency_penalty, "echo": echo_prompt}


def helm_call(cl, raw):
    """What HELM keeps of an answer: per choice its text, its tokens' texts
    and log-probabilities (null read as 0) and their sum; or the error text
    HELM's RequestResult would carry."""
    try:
        response = cl.completions.create(**raw).model_dump(mode="json")
    except ts.openai.OpenAIError as e:
        return f"OpenAI error: {e}"
    out = []
    for choice in response["choices"]:
        lp = choice["logprobs"]
        tokens = [(t, x or 0) for t, x in zip(lp["tokens"], lp["token_logprobs"])]
        out.append({"text": choice["text"], "tokens": tokens, "logprob": sum(x for _, x in tokens),
                    "top": lp["top_logprobs"], "finish": choice["finish_reason"]})
    return out


def check_top5(s, top, step, what):
    """A position's top_logprobs (logprobs 5) against Hugging Face's five
    largest logits there: the ids clearly among the five present, and the
    differences between entries those of the logits.  The entries compared."""
    texts = [detokenize(s, [tid]) for tid, _ in step]
    if len(set(texts)) < len(texts):
        return 0  # two ids of one text: the answer keeps one key for both
    fifth, n = step[-1][1], 0
    for (tid, logit), t in zip(step, texts):
        if logit - fifth > 2 * TOL:
            check(t in top, f"{what}: Hugging Face's top id {tid} ({t!r}) missing from {top}")
        if t in top and texts[0] in top:
            want = logit - step[0][1]
            got = top[t] - top[texts[0]]
            check(abs(got - want) <= 2 * TOL, f"{what}: {t!r} {got:.5f} vs Hugging Face {want:.5f}")
            n += 1
    return n


def test_helm(s, heldout, golden):
    cl = s.client()
    # language modeling: a text, echoed and scored, nothing generated; HELM's
    # default temperature 1 and top_k_per_token 5 (best_of 5 > n: harmless with
    # max_tokens 0, every candidate the same)
    for i in (0, 1):
        text = detokenize(s, heldout["input_ids"][i][1:])
        for k, temp in ((1, 0), (5, 1.0)):
            got = helm_call(cl, helm_request(text, temperature=temp, top_k_per_token=k,
                                             max_tokens=0, echo_prompt=True))
            if not check(isinstance(got, list) and len(got) == 1, f"HELM LM request: {got}"):
                continue
            c = got[0]
            ref = heldout["token_logprobs"][i]
            lps = [x for _, x in c["tokens"]]
            check(c["text"] == text, "the echoed text is the prompt")
            check(len(lps) == len(ref) + 1 and lps[0] == 0,
                  f"{len(lps)} tokens, the first (bos, null) read as 0")
            worst = max(abs(a - b) for a, b in zip(lps[1:], ref))
            check(worst <= TOL, f"HELM LM logprobs off Hugging Face's by {worst}")
            check(abs(c["logprob"] - sum(ref)) <= TOL * 20, f"sum {c['logprob']} vs {sum(ref)}")
            check(all(len(t) <= k + 1 for t in c["top"][1:]), f"top_logprobs of {k}")

    # generation as HELM's multiple-choice and short-answer adapters ask:
    # temperature 0, top_k_per_token 5 (best_of = logprobs = 5), a stop
    top5 = golden["greedy_step_top5"]["rows"]
    compared = 0
    for r, text in enumerate(golden["prompt_texts"]):
        got = helm_call(cl, helm_request(text, temperature=0, top_k_per_token=5, max_tokens=5,
                                         stop_sequences=["\n\n"]))
        if not check(isinstance(got, list) and len(got) == 1, f"HELM generation {r}: {got}"):
            continue
        c = got[0]
        ref = detokenize(s, golden["greedy_new_tokens"][r][:5])
        check(c["text"] == ref.split("\n\n")[0], f"HELM generation {r}: {c['text']!r} vs {ref!r}")
        check(1 <= len(c["top"]) <= 5, f"HELM generation {r}: {len(c['top'])} top_logprobs entries")
        for t, (top, step) in enumerate(zip(c["top"], top5[r])):
            compared += check_top5(s, top, step, f"row {r} step {t}")
    check(compared >= 80, f"only {compared} top_logprobs entries compared with Hugging Face's")
    print(f"HELM generation: {compared} top_logprobs entries match Hugging Face's logits")
    # n = 2 greedy: best_of = logprobs = 2, two identical choices
    got = helm_call(cl, helm_request(golden["prompt_texts"][0], temperature=0, num_completions=2,
                                     max_tokens=6))
    if check(isinstance(got, list) and len(got) == 2, f"HELM n=2: {got}"):
        check(got[0] == got[1], "greedy choices are the same")
        check(got[0]["text"] == detokenize(s, golden["greedy_new_tokens"][0][:6]), f"{got[0]}")
    # n = 3 sampled (HELM's temperature 1): accepted, choice k sampling with seed + k
    raw = {**helm_request("def main(", num_completions=3, max_tokens=8), "seed": 7}
    st, o = post(s, "/v1/completions", raw)
    if check(st == 200 and len(o["choices"]) == 3, f"HELM n=3: {st} {str(o)[:200]}"):
        for k, c in enumerate(sorted(o["choices"], key=lambda c: c["index"])):
            one = post(s, "/v1/completions", {**raw, "n": 1, "best_of": 1, "seed": 7 + k})[1]
            check(one["choices"][0]["text"] == c["text"],
                  f"choice {k} of n=3 is the sample of seed 7+{k}")
        check(o["usage"]["prompt_tokens"] == len(tokenize(s, "def main(")),
              f"a prompt's tokens count once in usage: {o['usage']}")
    # where the fields would change the result: refused by name
    for raw, param in ((helm_request("x", temperature=0.7, top_k_per_token=3, max_tokens=5), "best_of"),
                       (helm_request("x", presence_penalty=0.5, max_tokens=5), "presence_penalty"),
                       (helm_request("x", frequency_penalty=-1, max_tokens=5), "frequency_penalty")):
        got = helm_call(cl, raw)
        check(isinstance(got, str) and "Error code: 400" in got and f'"{param}"' in got,
              f"{param}: HELM's error {got!r}")
    st, o = post(s, "/v1/completions", {"prompt": "x", "n": 3, "best_of": 2})
    check(st == 400 and o["error"]["param"] == "best_of", f"best_of < n: {st} {o}")
    for field, v in (("n", 0), ("n", 129), ("n", "2"), ("best_of", 21), ("best_of", 1.5)):
        st, o = post(s, "/v1/completions", {"prompt": "x", field: v})
        check(st == 400 and o["error"]["param"] == field, f"{field} {v!r}: {st} {o}")
    st, o = post(s, "/v1/completions", {"prompt": ["a"] * 40, "n": 128, "max_tokens": 1})
    check(st == 400 and o["error"]["param"] == "prompt", f"40 prompts x n 128: {st} {o}")


# ---- log-probabilities in a stream ------------------------------------------------------------


def stream(s, body):
    """The data chunks of a streamed answer, parsed (None for [DONE])."""
    c = s.conn()
    try:
        c.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        check(r.status == 200, f"stream {body}: {r.status}")
        out = []
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: "):
                out.append(None if line == "data: [DONE]" else json.loads(line[6:]))
        return out
    finally:
        c.close()


def test_stream_logprobs(s):
    """The chunks' logprobs put together are the whole answer's, their texts
    its text; one completion token per chunk; the echo first."""
    bodies = [{"prompt": "def main(", "max_tokens": 12, "logprobs": 2},
              {"prompt": "import os\n", "max_tokens": 10, "logprobs": 0, "echo": True},
              {"prompt": [[8191, 4299, 1388, 7], [8191, 1174, 25]], "max_tokens": 6, "logprobs": 3,
               "echo": True},
              {"prompt": "class Foo:\n    def ", "max_tokens": 24, "logprobs": 1,
               "stop": ["(", "\n"]},
              {"prompt": "x = [1, 2,", "max_tokens": 0, "logprobs": 1, "echo": True},
              {"prompt": "for i in range(", "max_tokens": 5, "logprobs": 1, "n": 2,
               "temperature": 0.9, "seed": 3},
              {"prompt": "# é 🎉 ü", "max_tokens": 8, "logprobs": 1, "echo": True}]
    keys = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    for body in bodies:
        st, whole = post(s, "/v1/completions", body)
        if not check(st == 200, f"{body}: {st} {str(whole)[:200]}"):
            continue
        chunks = stream(s, body)
        check(chunks and chunks[-1] is None, f"{body}: the stream ends with [DONE]")
        for want in whole["choices"]:
            mine = [c["choices"][0] for c in chunks[:-1] if c["choices"][0]["index"] == want["index"]]
            text = "".join(c["text"] for c in mine)
            check(text == want["text"], f"{body}: streamed text {text!r} != {want['text']!r}")
            lp = {k: [x for c in mine for x in c["logprobs"][k]] for k in keys}
            check(lp == want["logprobs"], f"{body}: streamed logprobs differ: {lp} != {want['logprobs']}")
            check(mine[-1]["finish_reason"] == want["finish_reason"] and
                  all(c.get("finish_reason") is None for c in mine[:-1]), f"{body}: finish_reason")
            gen = mine[1:-1] if body.get("echo") else mine[:-1]
            check(all(len(c["logprobs"]["tokens"]) == 1 for c in gen),
                  f"{body}: one completion token per chunk")
            if body.get("echo"):
                n = len(mine[0]["logprobs"]["tokens"])
                check(n > 1 and mine[0]["logprobs"]["token_logprobs"][0] is None,
                      f"{body}: the first chunk holds the prompt's {n} entries")
    # the openai client reads such a stream
    cl = s.client()
    parts = list(cl.completions.create(model=NAME, prompt="def f(", max_tokens=6, logprobs=1,
                                       extra_body={"ignore_eos": True},
                                       stream=True, temperature=0))
    toks = [t for p in parts for t in (p.choices[0].logprobs.tokens if p.choices[0].logprobs else [])]
    check(len(toks) == 6, f"openai stream with logprobs: {len(toks)} tokens")


# ---- max_tokens 1 with echo costs a scored prefill -----------------------------------------------


def test_prefill_cost(heldout, tmp):
    """lm-eval's shape generates its one token from the prefill's last
    logits: run-batch (one request per batch) computes the prompt's positions
    for max_tokens 0 and 1, and one more for 2."""
    ids = heldout["input_ids"][3][:100]
    got = []
    for mt in (0, 1, 2):
        inp = os.path.join(tmp, f"cost{mt}.jsonl")
        with open(inp, "w") as f:
            f.write(json.dumps({"custom_id": "a", "prompt": ids, "max_tokens": mt, "echo": True,
                                "logprobs": 1}) + "\n")
        rb = subprocess.run([ts.FG, *ts.CONFIG, "-o", "policy.gpu_batch_size=1", "-o",
                             "policy.num_gpu_batches=1", "run-batch", "--input", inp, "--output",
                             os.path.join(tmp, f"cost{mt}.out")], capture_output=True, text=True,
                            timeout=120)
        m = re.search(r"of (\d+) computed positions in 1 batches", rb.stderr)
        check(rb.returncode == 0 and m, f"run-batch max_tokens {mt}: {rb.stderr}")
        got.append(int(m.group(1)) if m else None)
    check(got == [100, 100, 101], f"positions computed for max_tokens 0, 1, 2: {got}")
    print(f"positions for 100 prompt ids, max_tokens 0/1/2: {got}")


def test_shared_prefix(s, heldout):
    # lm-eval's multiple-choice shape: per document one request of four
    # prompts, its context and four continuations (the held-out one and three
    # others), three documents at once.  A server sharing prompt prefixes
    # ([policy] share_prefix) gives the held-out continuations Hugging Face's
    # log-likelihood and every prompt the unshared server's numbers, and its
    # exit line counts the positions sharing saved.
    docs = []
    for i in range(3):
        ids = heldout["input_ids"][i]
        ctx, cont = 30 + 5 * i, 2 + i
        ref = sum(heldout["token_logprobs"][i][ctx - 1:ctx + cont - 1])
        true = ids[ctx:ctx + cont]
        others = [[(t + 7 * k) % 8000 + 4 for t in true] for k in (1, 2, 3)]
        docs.append(([ids[:ctx] + c for c in [true] + others], ctx, ref, cont))
    shared = ts.Server(config=["-o", "policy.share_prefix=8"])
    try:
        with ThreadPoolExecutor(3) as ex:
            got = list(ex.map(lambda d: post(shared, "/v1/completions", lm_eval_body(d[0])), docs))
            want = list(ex.map(lambda d: post(s, "/v1/completions", lm_eval_body(d[0])), docs))
    finally:
        rc = shared.stop()
    check(rc == 0, f"the sharing server exited {rc} on SIGTERM")
    worst = 0.0
    for (prompts, ctx, ref, cont), (st, o), (st2, o2) in zip(docs, got, want):
        if not check(st == 200 and st2 == 200, f"multiple choice: {st} {str(o)[:300]}"):
            continue
        lls = lm_eval_parse(o, [ctx] * 4)
        check(abs(lls[0][0] - ref) <= TOL * cont,
              f"shared: loglikelihood {lls[0][0]} vs Hugging Face {ref} ({cont} tokens)")
        for a, b in zip(sorted(o["choices"], key=lambda c: c["index"]),
                        sorted(o2["choices"], key=lambda c: c["index"])):
            for x, y in zip(a["logprobs"]["token_logprobs"][1:], b["logprobs"]["token_logprobs"][1:]):
                worst = max(worst, abs(x - y))
    check(worst <= 1e-4, f"shared against unshared: log-probabilities differ by {worst}")
    m = [re.search(r"(\d+) saved by shared prompt prefixes", line) for line in shared.lines]
    saved = [int(x.group(1)) for x in m if x]
    check(saved and saved[-1] > 0, f"the sharing server saved no positions: {shared.lines[-3:]}")
    print(f"shared prompt prefixes over serve: {saved[-1] if saved else 0} positions saved, "
          f"worst |diff| against unshared {worst:.2e}")


def main():
    with open(os.path.join(ts.MODEL, "heldout.json")) as f:
        heldout = json.load(f)
    with open(os.path.join(ts.MODEL, "golden.json")) as f:
        golden = json.load(f)
    with open(os.path.join(ts.MODEL, "config.json")) as f:
        config = json.load(f)
    tmp = tempfile.mkdtemp(prefix="fgcore-harness-")
    s = ts.Server()
    try:
        for t in (lambda: test_tokenizer(s, golden, heldout, config),
                  lambda: test_tokenizer_malformed(s), lambda: test_lm_eval(s, heldout, golden),
                  lambda: test_helm(s, heldout, golden), lambda: test_stream_logprobs(s),
                  lambda: test_shared_prefix(s, heldout)):
            t()
    finally:
        rc = s.stop()
    check(rc == 0, f"serve exited {rc} on SIGTERM")
    test_no_tokenizer(tmp)
    test_prefill_cost(heldout, tmp)
    subprocess.run(["rm", "-rf", tmp])
    if ts.failures:
        for line in s.lines:
            if not re.match(r"fgcore: serve: [A-Z]+ /", line):
                print("serve:", line)
        print(f"{len(ts.failures)} failures")
        return 1
    print("all harness checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
