#!/usr/bin/env python3
"""Build tests/data/gemma2-tiny: a tiny random Gemma2ForCausalLM saved the
way current Hugging Face transformers saves it (config.json with
layer_types, fp16 model.safetensors), and Hugging Face's own outputs for it
in the format of the shared reference data (FGCORE_TESTDATA's README:
golden.json and golden_prefill_last_logits.f32), the same files and keys as
tests/data/qwen2-tiny.

Only the making of the data needs Python, torch and transformers; the files
are committed and the engine and its tests never run this script.  What it
shares with the other make_*.py scripts is in hf_golden.py.

  python3 tests/reference/make_gemma2.py [out_dir]   (default tests/data/gemma2-tiny)

The model: vocab 512, hidden 64, 3 layers (layer_types sliding, full,
sliding: Gemma2Config's alternation), 4 query heads over 2 key/value heads
of head_dim 32 (not hidden / heads = 16), query_pre_attn_scalar 24 (not
head_dim: the scores are scaled by 24^-0.5), a window of 8 positions,
attn_logit_softcapping 5 and final_logit_softcapping 3 (small, so that
both caps bite), GeGLU 128 (gelu_pytorch_tanh), RMSNorm eps 1e-6 scaling
by 1 + w, rotary theta 10000, 256 positions, tied embeddings scaled by
sqrt(64) at the input; Gemma's token ids (pad 0, eos 1, bos 2).  The
weights are hf_golden's (projections std 0.15), except the RMSNorm weights,
which Gemma stores as w of 1 + w: std 0.3 around 0; and the (tied)
embeddings, std 0.25, so that the logits spread over a few units: the final
cap of 3 bends the largest of them without rounding any two to the same
fp32 value (a cap on logits of std 8 made exact ties of 3.0).

The script checks (and prints) that Hugging Face's logits match an
independent fp32 forward written here from the formulas (so the math the
engine implements is the one transformers runs), and that each piece
matters: the logits move noticeably with the attention cap off, the final
cap off, the window off, the scale 1/sqrt(head_dim) in place of
query_pre_attn_scalar^-0.5, and 1 + w read as w.

The references are computed in fp32 from a fresh load of the saved fp16
weights, eager attention, each prompt alone (positions from 0, no padding,
no cache: every step recomputes the whole sequence); golden.json lists the
prompts left-padded with pad_token_id and their attention mask.
"""
import math
import os
import sys

import torch
import transformers
from transformers import Gemma2Config, Gemma2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_golden  # noqa: E402

torch.set_num_threads(2)

SEED = 20251205
WINDOW = 8
HEAD_DIM = 32
QUERY_SCALAR = 24
ATTN_CAP = 5.0
FINAL_CAP = 3.0
LAYERS = 3
EMBED_STD = 0.25


def make_model():
    tiny = dict(hf_golden.TINY, num_hidden_layers=LAYERS, tie_word_embeddings=True,
                pad_token_id=0, eos_token_id=1, bos_token_id=2)
    cfg = Gemma2Config(**tiny, head_dim=HEAD_DIM, query_pre_attn_scalar=QUERY_SCALAR,
                       sliding_window=WINDOW, attn_logit_softcapping=ATTN_CAP,
                       final_logit_softcapping=FINAL_CAP, rms_norm_eps=1e-6,
                       hidden_activation="gelu_pytorch_tanh")
    model = hf_golden.random_model(Gemma2ForCausalLM, cfg, SEED)
    g = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # Gemma's w of 1 + w
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:  # logits of a few units: a cap of 3 bites, never saturates
                p.copy_(EMBED_STD * torch.randn(p.shape, generator=g))
    return model


# --- an independent forward, for the checks ---------------------------------

def hand_forward(sd, cfg, ids, attn_cap=ATTN_CAP, final_cap=FINAL_CAP, window=WINDOW,
                 scale=QUERY_SCALAR ** -0.5, shift=1.0):
    """Logits of every position, fp32, from the state dict, with the given
    caps (None: off), window (None: off), score scale and norm shift."""
    H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, HEAD_DIM
    eps, n = cfg.rms_norm_eps, len(ids)
    theta = cfg.rope_parameters["rope_theta"]
    W = lambda k: sd[k].float()

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (shift + w)

    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()

    def rope(x):  # halves rotated (rotate_half layout)
        a, b = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def gelu_tanh(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    emb = W("model.embed_tokens.weight")
    x = emb[torch.tensor(ids)] * torch.tensor(cfg.hidden_size ** 0.5)
    for l in range(cfg.num_hidden_layers):
        pre = f"model.layers.{l}."
        lin = lambda h, p: h @ W(pre + p + ".weight").T
        h = rms(x, W(pre + "input_layernorm.weight"))
        q = rope(lin(h, "self_attn.q_proj").view(n, H, D).transpose(0, 1))
        k = rope(lin(h, "self_attn.k_proj").view(n, KV, D).transpose(0, 1))
        v = lin(h, "self_attn.v_proj").view(n, KV, D).transpose(0, 1)
        k = k.repeat_interleave(H // KV, 0)
        v = v.repeat_interleave(H // KV, 0)
        s = (q @ k.transpose(1, 2)) * scale
        if attn_cap is not None:
            s = attn_cap * torch.tanh(s / attn_cap)
        seen = j <= i
        if window is not None and cfg.layer_types[l] == "sliding_attention":
            seen &= j > i - window
        s = s.masked_fill(~seen, float("-inf")).softmax(-1)
        a = lin((s @ v).transpose(0, 1).reshape(n, H * D), "self_attn.o_proj")
        x = x + rms(a, W(pre + "post_attention_layernorm.weight"))
        h = rms(x, W(pre + "pre_feedforward_layernorm.weight"))
        m = lin(gelu_tanh(lin(h, "mlp.gate_proj")) * lin(h, "mlp.up_proj"), "mlp.down_proj")
        x = x + rms(m, W(pre + "post_feedforward_layernorm.weight"))
    logits = rms(x, W("model.norm.weight")) @ emb.T
    if final_cap is not None:
        logits = final_cap * torch.tanh(logits / final_cap)
    return logits


def check(model, rows):
    """HF is the hand forward, and every piece moves the logits."""
    cfg = model.config
    sd = dict(model.state_dict())
    variants = {
        "attention cap off": dict(attn_cap=None),
        "final cap off": dict(final_cap=None),
        "window off": dict(window=None),
        "scale 1/sqrt(head_dim)": dict(scale=HEAD_DIM ** -0.5),
        "norms by w, not 1 + w": dict(shift=0.0),
    }
    worst = 0.0
    moved = {k: 0.0 for k in variants}
    with torch.no_grad():
        for p in rows:
            hf = model(torch.tensor([p]), use_cache=False).logits[0].float()
            worst = max(worst, float((hf - hand_forward(sd, cfg, p)).abs().max()))
            for name, kw in variants.items():
                moved[name] = max(moved[name], float(
                    (hf - hand_forward(sd, cfg, p, **kw)).abs().max()))
    print(f"  all positions: |HF - hand forward| max {worst:.2e}")
    for name, d in moved.items():
        print(f"  |HF - hand forward with {name}| max {d:.3f}")
    assert worst < 1e-4, worst
    assert all(d > 0.1 for d in moved.values()), moved


def main():
    out = hf_golden.out_dir("gemma2-tiny")
    saved = hf_golden.save_fp16(make_model(), out)
    assert saved.get("layer_types") == ["sliding_attention", "full_attention",
                                        "sliding_attention"], saved.get("layer_types")
    assert saved["sliding_window"] == WINDOW and saved["head_dim"] == HEAD_DIM

    model = hf_golden.load_fp32(Gemma2ForCausalLM, out)
    rows = hf_golden.prompts(SEED)
    logits, greedy, margin, top5 = hf_golden.references(model, rows)
    # Neither pad, eos nor bos (0, 1, 2): fg_generate stops at eos, and no
    # engine's special handling of the others is in play.
    assert all(x > 2 for t in greedy for x in t), "a greedy row made a special id: change SEED"

    text = hf_golden.describe(
        "Gemma2ForCausalLM", rest=f"; layers sliding (window {WINDOW}), full, sliding; "
        f"attn_logit_softcapping {ATTN_CAP}, final_logit_softcapping {FINAL_CAP}, "
        f"query_pre_attn_scalar {QUERY_SCALAR}, head_dim {HEAD_DIM}")
    hf_golden.write_golden(out, text, rows, logits, greedy, margin, top5)

    low = [min(m) for m in margin]
    print(f"{out}: transformers {transformers.__version__}; prefill logits in "
          f"[{float(torch.stack(logits).min()):.3f}, {float(torch.stack(logits).max()):.3f}], "
          "smallest margin per row " + ", ".join(f"{x:.4f}" for x in low))
    check(model, rows)


if __name__ == "__main__":
    main()
