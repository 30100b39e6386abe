#!/usr/bin/env python3
"""Build tests/data/qwen2-tiny: a tiny random Qwen2ForCausalLM saved the way
current Hugging Face transformers saves it (config.json with `layer_types`,
fp16 model.safetensors), and Hugging Face's own outputs for it in the format
of the shared reference data (FGCORE_TESTDATA's README: golden.json and
golden_prefill_last_logits.f32).

Only the making of the data needs Python, torch and transformers; the files
are committed and the engine and its tests never run this script.

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
import json
import os
import sys

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

SEED = 20251205
VOCAB = 512
PAD, BOS, EOS = 0, 1, 2
PROMPT_LENS = (25, 10, 17, 6)
NEW_TOKENS = 32


def make_model():
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        use_sliding_window=False,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    # Current transformers writes one entry per layer; older ones wrote none.
    if getattr(cfg, "layer_types", None) is None:
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
    return model


def prompts():
    g = torch.Generator().manual_seed(SEED + 1)
    # Ids above the special ones, so that no prompt holds pad, bos or eos.
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENS]


def reference(model, prompt):
    """Prefill logits, greedy tokens, margins and top-5 for one prompt alone."""
    ids = list(prompt)
    tokens, margins, top5, prefill = [], [], [], None
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            if prefill is None:
                prefill = logits.clone()
            vals, idx = torch.topk(logits, 5)
            tok = int(idx[0])
            assert tok == int(torch.argmax(logits))
            tokens.append(tok)
            margins.append(float(vals[0] - vals[1]))
            top5.append([[int(i), round(float(v), 5)] for i, v in zip(idx, vals)])
            ids.append(tok)
    return prefill, tokens, margins, top5


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "qwen2-tiny")
    os.makedirs(out, exist_ok=True)
    make_model().half().save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        saved = json.load(f)
    assert saved.get("layer_types") == ["full_attention"] * 2, saved.get("layer_types")

    model = Qwen2ForCausalLM.from_pretrained(out, dtype=torch.float32,
                                             attn_implementation="eager").eval()
    rows = prompts()
    plen = max(len(p) for p in rows)
    logits, greedy, margin, top5 = [], [], [], []
    for p in rows:
        l, t, m, k = reference(model, p)
        logits.append(l)
        greedy.append(t)
        margin.append(m)
        top5.append(k)
    # fg_generate stops at eos: the references must run their 32 steps.
    assert all(EOS not in t for t in greedy), "a greedy row reached eos: change SEED"

    golden = {
        "reference": f"transformers {transformers.__version__} Qwen2ForCausalLM, fp32 compute "
                     "from the fp16 weights in model.safetensors; each row computed alone "
                     "(positions from 0, no padding)",
        "input_ids": [[PAD] * (plen - len(p)) + p for p in rows],
        "attention_mask": [[0] * (plen - len(p)) + [1] * len(p) for p in rows],
        "pad_token_id": PAD,
        "prefill_last_logits": {"file": "golden_prefill_last_logits.f32", "dtype": "float32-le",
                                "shape": [len(rows), VOCAB]},
        "greedy_new_tokens": greedy,
        "greedy_top1_top2_margin": margin,
        "greedy_step_top5": {
            "doc": "per row, per generated step: [token id, logit] of the 5 largest logits, "
                   "with the reference's own greedy tokens as context",
            "rows": top5,
        },
        "max_new_tokens": NEW_TOKENS,
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    torch.stack(logits).numpy().astype("<f4").tofile(
        os.path.join(out, "golden_prefill_last_logits.f32"))

    low = [min(m) for m in margin]
    print(f"{out}: prefill logits in [{float(torch.stack(logits).min()):.3f}, "
          f"{float(torch.stack(logits).max()):.3f}], smallest margin per row "
          + ", ".join(f"{x:.4f}" for x in low))


if __name__ == "__main__":
    main()
