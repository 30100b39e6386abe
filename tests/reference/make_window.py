#!/usr/bin/env python3
"""Build tests/data/mistral-window-tiny and tests/data/qwen2-window-tiny: two
tiny random checkpoints with sliding-window attention, saved the way current
Hugging Face transformers saves them (fp16 model.safetensors), and Hugging
Face's own outputs for them in the format of the shared reference data
(FGCORE_TESTDATA's README: golden.json and golden_prefill_last_logits.f32),
the same files and keys as tests/data/qwen2-tiny (tests/reference/make_qwen2.py).

Only the making of the data needs Python, torch and transformers; the files
are committed and the engine and its tests never run this script.
What it shares with the other make_*.py scripts (random weights, prompts,
fp16 save and fp32 reload, the references, golden.json) is in hf_golden.py.

  python3 tests/reference/make_window.py [data_dir]   (default tests/data)

Both models: vocab 512, hidden 64, 2 layers, 4 query heads over 2 key/value
heads of 16, SwiGLU 128, RMSNorm eps 1e-5, rotary theta 10000, 256
positions, an lm_head of its own (untied), a window of 8 positions.

  mistral-window-tiny  MistralForCausalLM, sliding_window 8: every layer is
                       windowed (MistralConfig has no layer_types; the model
                       builds one sliding mask for all layers when
                       sliding_window is set).
  qwen2-window-tiny    Qwen2ForCausalLM with Qwen2's biases on q, k and v,
                       use_sliding_window true, sliding_window 8,
                       max_window_layers 1: Qwen2Config derives layer_types
                       ["full_attention", "sliding_attention"] (a layer i is
                       windowed when i >= max_window_layers) and saves it.

The window, as transformers 5.25 applies it (masking_utils.py,
sliding_window_overlay: `return kv_idx > q_idx - sliding_window`, and'ed
with the causal `kv_idx <= q_idx`): the query at position i sees the keys
at positions j with i - 8 < j <= i, i.e. itself and the 7 before it.

The prompts (lengths 25, 10, 17, 6) and their 32 greedy tokens run far past
the window, so the window changes the logits; the weights are random but
larger than Hugging Face's initialisation (as make_qwen2.py: std 0.15 for
the projections, 0.1 for the biases, RMSNorm weights around 1) so that
attention weighs positions unevenly and the window shows. The script checks
(and prints) that: Hugging Face's logits match an independent fp32 forward
written here with that window rule and differ from it with the rule off by
one (i - 8 <= j) and with no window; a window of 10000 gives the logits of
no window; the greedy tokens without the window differ.

The references are computed in fp32 from a fresh load of the saved fp16
weights, eager attention, each prompt alone (positions from 0, no padding,
no cache: every step recomputes the whole sequence); golden.json lists the
prompts left-padded with pad_token_id and their attention mask, as the
shared data does.
"""
import os
import sys

import torch
import transformers
from transformers import (MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_golden  # noqa: E402
from hf_golden import EOS, NEW_TOKENS  # noqa: E402

torch.set_num_threads(2)

SEED = 20251205
WINDOW = 8

COMMON = dict(**hf_golden.TINY, rms_norm_eps=1e-5)

MODELS = {
    "mistral-window-tiny": dict(
        cls=MistralForCausalLM,
        config=lambda: MistralConfig(head_dim=16, sliding_window=WINDOW, **COMMON),
        windowed=[True, True],
        layer_types=None,  # MistralConfig saves none
        seed=SEED + 10,
    ),
    "qwen2-window-tiny": dict(
        cls=Qwen2ForCausalLM,
        config=lambda: Qwen2Config(use_sliding_window=True, sliding_window=WINDOW,
                                   max_window_layers=1, **COMMON),
        windowed=[False, True],
        layer_types=["full_attention", "sliding_attention"],
        seed=SEED + 29,
    ),
}


def make_model(spec):
    return hf_golden.random_model(spec["cls"], spec["config"](), spec["seed"])


def last_logits(model, ids):
    return model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()


def greedy(model, prompt):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            ids.append(int(torch.argmax(last_logits(model, ids))))
    return ids[len(prompt):]


# --- an independent forward, for the check of the window rule only ---------

def hand_forward(sd, cfg, ids, windows, lo_inclusive=False):
    """Logits of every position, fp32, from the state dict; windows[l] is the
    window of layer l or None. Key j is seen by query i when j <= i and
    j > i - w (or j >= i - w with lo_inclusive)."""
    H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, 16
    eps = cfg.rms_norm_eps
    theta = cfg.rope_parameters["rope_theta"]
    n = len(ids)
    W = lambda k: sd[k].float()

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()

    def rope(x):  # x: [heads, n, D], halves rotated (HF rotate_half layout)
        a, b = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def lin(x, p):
        y = x @ W(p + ".weight").T
        return y + W(p + ".bias") if p + ".bias" in sd else y

    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    x = W("model.embed_tokens.weight")[torch.tensor(ids)]
    for l in range(cfg.num_hidden_layers):
        pre = f"model.layers.{l}."
        h = rms(x, W(pre + "input_layernorm.weight"))
        q = lin(h, pre + "self_attn.q_proj").view(n, H, D).transpose(0, 1)
        k = lin(h, pre + "self_attn.k_proj").view(n, KV, D).transpose(0, 1)
        v = lin(h, pre + "self_attn.v_proj").view(n, KV, D).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // KV, 0)
        v = v.repeat_interleave(H // KV, 0)
        seen = j <= i
        w = windows[l]
        if w is not None:
            seen &= (j >= i - w) if lo_inclusive else (j > i - w)
        s = (q @ k.transpose(1, 2)) / D ** 0.5
        s = s.masked_fill(~seen, float("-inf")).softmax(-1)
        x = x + lin((s @ v).transpose(0, 1).reshape(n, H * D), pre + "self_attn.o_proj")
        h = rms(x, W(pre + "post_attention_layernorm.weight"))
        g = torch.nn.functional.silu(lin(h, pre + "mlp.gate_proj"))
        x = x + lin(g * lin(h, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    return rms(x, W("model.norm.weight")) @ W("lm_head.weight").T


def variant(cls, out, change):
    """The saved model, loaded again with its config changed by change(cfg)."""
    cfg = transformers.AutoConfig.from_pretrained(out)
    change(cfg)
    return cls.from_pretrained(out, config=cfg, dtype=torch.float32,
                               attn_implementation="eager").eval()


def no_window(cfg):
    cfg.sliding_window = None
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    if hasattr(cfg, "use_sliding_window"):
        cfg.use_sliding_window = False


def huge_window(cfg):
    cfg.sliding_window = 10000


def check(name, spec, model, out, rows, logits, tokens):
    """The window is applied as documented above and changes the results."""
    cls = spec["cls"]
    cfg = model.config
    sd = {k: v for k, v in model.state_dict().items()}
    windows = [WINDOW if w else None for w in spec["windowed"]]
    hf_vs_hand, off_by_one, hand_nowin = 0.0, 0.0, 0.0
    with torch.no_grad():
        for p in rows:
            hf = model(torch.tensor([p]), use_cache=False).logits[0].float()
            hand = hand_forward(sd, cfg, p, windows)
            hf_vs_hand = max(hf_vs_hand, float((hf - hand).abs().max()))
            off_by_one = max(off_by_one, float(
                (hf - hand_forward(sd, cfg, p, windows, lo_inclusive=True)).abs().max()))
            hand_nowin = max(hand_nowin, float(
                (hf - hand_forward(sd, cfg, p, [None] * len(windows))).abs().max()))
    print(f"  all positions of the prompts: |HF - hand(i-{WINDOW} < j <= i)| max {hf_vs_hand:.2e}; "
          f"|HF - hand(i-{WINDOW} <= j <= i)| max {off_by_one:.3f}; "
          f"|HF - hand(no window)| max {hand_nowin:.3f}")
    assert hf_vs_hand < 1e-4 and off_by_one > 0.1 and hand_nowin > 0.1

    full = variant(cls, out, no_window)
    huge = variant(cls, out, huge_window)
    print(f"  no-window config: sliding_window {full.config.sliding_window}, "
          f"layer_types {getattr(full.config, 'layer_types', None)}")
    d_full, d_huge = [], 0.0
    with torch.no_grad():
        for p, l in zip(rows, logits):
            lf = last_logits(full, p)
            d_full.append(float((l - lf).abs().max()))
            d_huge = max(d_huge, float((last_logits(huge, p) - lf).abs().max()))
    print("  prefill last logits, |window - no window| max per row: "
          + ", ".join(f"{x:.4f}" for x in d_full)
          + f"  (row of 6 tokens fits the window); window 10000 vs none: {d_huge:.2e}")
    assert max(d_full[:3]) > 0.1 and d_huge < 1e-5
    first_diff = []
    for p, t in zip(rows, tokens):
        tf = greedy(full, p)
        first_diff.append(next((s for s, (a, b) in enumerate(zip(t, tf)) if a != b), None))
        print(f"    greedy with window    {t}\n    greedy without window {tf}")
    print("  greedy tokens: first step that differs without the window, per row: "
          + ", ".join(str(x) for x in first_diff))
    assert all(x is not None for x in first_diff)
    return d_full, first_diff


def build(name, spec, out):
    saved = hf_golden.save_fp16(make_model(spec), out)
    assert saved.get("layer_types") == spec["layer_types"], saved.get("layer_types")
    assert saved["sliding_window"] == WINDOW, saved["sliding_window"]

    cls = spec["cls"]
    model = hf_golden.load_fp32(cls, out)
    rows = hf_golden.prompts(SEED)
    logits, greedy_tokens, margin, top5 = hf_golden.references(model, rows, last_logits)
    # fg_generate stops at eos: the references must run their 32 steps.
    assert all(EOS not in t for t in greedy_tokens), "a greedy row reached eos: change seed"
    # Nor pad or bos, so that no engine's special handling of them is in play.
    assert all(x > EOS for t in greedy_tokens for x in t), "a greedy row made pad or bos: change seed"

    windowed = ", ".join(f"layer {i} {'window ' + str(WINDOW) if w else 'full'}"
                         for i, w in enumerate(spec["windowed"]))
    text = hf_golden.describe(cls.__name__, rest="; sliding-window attention "
                              f"({windowed}): query i sees keys j with i - {WINDOW} < j <= i")
    hf_golden.write_golden(out, text, rows, logits, greedy_tokens, margin, top5)

    low = [min(m) for m in margin]
    print(f"{out}: layer_types in config.json {saved.get('layer_types')}, "
          f"sliding_window {saved['sliding_window']}; prefill logits in "
          f"[{float(torch.stack(logits).min()):.3f}, {float(torch.stack(logits).max()):.3f}], "
          "smallest margin per row " + ", ".join(f"{x:.4f}" for x in low))
    check(name, spec, model, out, rows, logits, greedy_tokens)


def main():
    data = hf_golden.out_dir()
    for name, spec in MODELS.items():
        build(name, spec, os.path.join(data, name))


if __name__ == "__main__":
    main()
