#!/usr/bin/env python3
"""tests/reference/hf_fp16.py - how far Hugging Face's own fp16 path is from
its fp32 references, with the model in torch.float16 (every weight and
activation in fp16, the residual stream too, as Hugging Face runs it on a
GPU), on the two kinds of reference the tests use:
  heldout.json   teacher-forced log-probabilities of held-out text (test_scoring);
  golden.json    teacher-forced logits at each step's five listed ids, the
                 reference's greedy tokens as context (test_golden).
This bounds what any fp16 implementation can be held to.

Run: python3 tests/reference/hf_fp16.py $FGCORE_TESTDATA/opt/opt-py-128x4 [more folders]
(needs torch and transformers; on a CPU, fp16 arithmetic is emulated by
PyTorch with fp32 accumulation in its matrix products, as cuBLAS does).
Measured 2026-12-01 (torch 2.15.0, transformers 5.24.0 from PyPI, CPU):
  heldout, max |log-probability error| (fp32 path / fp16 path):
    opt-py-128x4   0.0000 / 0.0369 (mean 1.48e-3), perplexity +0.003 %
    llama-py-128x4 0.0043 / 0.0176 (mean 1.12e-3), perplexity +0.006 %
  golden, teacher-forced top-5 logits, max |error| (fp32 / fp16):
    opt-tiny-64x2  0.0000 / 0.0049      opt-tiny-128x4 0.0001 / 0.0656
    opt-py-128x4   0.0000 / 0.0203      llama-py-128x4 0.0014 / 0.0104
So the README's fp16 bounds (3e-2 a log-probability, 5e-2 a logit) are
beyond Hugging Face's own fp16 OPT on opt-py-128x4's held-out text and on
opt-tiny-128x4's golden steps; cublas keeps its residual stream in fp32 and
meets 3e-2 on the first (test_scoring); test_golden holds it to Hugging
Face's fp16 error where that exceeds 5e-2."""
import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM


def heldout(d, m, h):
    ids = torch.tensor(h["input_ids"])
    ref = torch.tensor(h["token_logprobs"], dtype=torch.float64)
    with torch.no_grad():
        logits = m(ids).logits  # [rows, seq, vocab] in the model's dtype
    lp = torch.log_softmax(logits.double(), -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    err = (lp - ref).abs()
    ppl = math.exp(-lp.mean().item())
    return "heldout: max |log-probability - fp32 reference| %.4f (mean %.2e), perplexity %.4f (reference %.4f, %+.3f %%)" % (
        err.max().item(), err.mean().item(), ppl, h["perplexity"], 100 * (ppl / h["perplexity"] - 1))


def golden(d, m, g):
    # prompt (left-padded) and the reference's greedy tokens, positions counting real tokens
    ids = torch.tensor(g["input_ids"])
    mask = torch.tensor(g["attention_mask"])
    greedy = torch.tensor(g["greedy_new_tokens"])
    full = torch.cat([ids, greedy], 1)
    fmask = torch.cat([mask, torch.ones_like(greedy)], 1)
    with torch.no_grad():
        logits = m(full, attention_mask=fmask).logits.float()
    rows, p, worst = g["greedy_step_top5"]["rows"], ids.shape[1], 0.0
    for r, steps in enumerate(rows):
        for t, top5 in enumerate(steps):
            for tid, want in top5:
                worst = max(worst, abs(logits[r, p - 1 + t, tid].item() - want))
    return "golden: teacher-forced top-5 logits max |error| %.4f over %d steps" % (worst, len(rows[0]))


torch.manual_seed(0)
for d in sys.argv[1:]:
    name = d.rstrip("/").split("/")[-1]
    for dtype in (torch.float32, torch.float16):
        m = AutoModelForCausalLM.from_pretrained(d, dtype=dtype).eval()
        for fname, fn in (("heldout.json", heldout), ("golden.json", golden)):
            try:
                ref = json.load(open(d + "/" + fname))
            except FileNotFoundError:
                continue
            print("%s %s %s" % (name, str(dtype).split(".")[-1], fn(d, m, ref)))
