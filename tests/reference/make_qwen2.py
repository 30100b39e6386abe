#!/usr/bin/env python3
"""Build tests/data/qwen2-tiny: a tiny random Qwen2ForCausalLM saved the way
current Hugging Face transformers saves it (config.json with `layer_types`,
fp16 model.safetensors), and Hugging Face's own outputs for it in the format
of the shared reference data (FGCORE_TESTDATA's README: golden.json and
golden_prefill_last_logits.f32).

Only the making of the data needs Python, torch and transformers; the files
are committed and the engine and its tests never run this script.
What it shares with the other make_*.py scripts (random weights, prompts,
fp16 save and fp32 reload, the references, golden.json) is in hf_golden.py.

  python3 tests/reference/make_qwen2.py [out_dir]   (default tests/data/qwen2-tiny)

The model: vocab 512, hidden 64, 2 layers, 4 query heads over 2 key/value
heads of 16, SwiGLU 128, RMSNorm eps 1e-6, rotary theta 10000, 256
positions, an lm_head of its own (untied), Qwen2's biases on q, k and v.
Its weights are random but larger than Hugging Face's initialisation (std
0.15 for the projections, 0.1 for the biases, RMSNorm weights around 1):
attention then weighs positions unevenly, every bias moves the logits, and
the logits spread over a few units, so that the engine's rotary positions,
masks and biases are all seen by the 1e-3 comparison.

The references are computed in fp32 from a fresh load of the saved fp16
weights, eager attention, each prompt alone (positions from 0, no padding,
no cache: every step recomputes the whole sequence); golden.json lists the
prompts left-padded with pad_token_id and their attention mask, as the
shared data does.
"""
import os
import sys

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_golden  # noqa: E402
from hf_golden import EOS  # noqa: E402

SEED = 20251205


def make_model():
    cfg = Qwen2Config(**hf_golden.TINY, rms_norm_eps=1e-6, use_sliding_window=False)
    # Current transformers writes one entry per layer; older ones wrote none.
    if getattr(cfg, "layer_types", None) is None:
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    return hf_golden.random_model(Qwen2ForCausalLM, cfg, SEED)


def main():
    out = hf_golden.out_dir("qwen2-tiny")
    saved = hf_golden.save_fp16(make_model(), out)
    assert saved.get("layer_types") == ["full_attention"] * 2, saved.get("layer_types")

    model = hf_golden.load_fp32(Qwen2ForCausalLM, out)
    rows = hf_golden.prompts(SEED)
    logits, greedy, margin, top5 = hf_golden.references(model, rows)
    # fg_generate stops at eos: the references must run their 32 steps.
    assert all(EOS not in t for t in greedy), "a greedy row reached eos: change SEED"

    hf_golden.write_golden(out, hf_golden.describe("Qwen2ForCausalLM"),
                           rows, logits, greedy, margin, top5)

    low = [min(m) for m in margin]
    print(f"{out}: prefill logits in [{float(torch.stack(logits).min()):.3f}, "
          f"{float(torch.stack(logits).max()):.3f}], smallest margin per row "
          + ", ".join(f"{x:.4f}" for x in low))


if __name__ == "__main__":
    main()
