#!/usr/bin/env python3
"""Build tests/data/qwen2-moe-tiny and tests/data/qwen3-moe-tiny: two tiny
random mixture-of-experts Qwen models (Qwen2MoeForCausalLM, the Qwen1.5-MoE
layout, and Qwen3MoeForCausalLM), and their wide kin qwen2-moe-wide-tiny and
qwen3-moe-wide-tiny (many narrow experts, as the published mixtures have),
saved the way current Hugging Face
transformers saves them (config.json, fp16 model.safetensors with one tensor
per expert projection), and Hugging Face's own outputs for them in the format
of the shared reference data (FGCORE_TESTDATA's README: golden.json and
golden_prefill_last_logits.f32), as tests/reference/make_qwen2.py does for
qwen2-tiny.

Only the making of the data needs Python, torch, transformers and
safetensors; the files are committed and the engine and its tests never run
this script.
What it shares with the other make_*.py scripts (random weights, prompts,
fp16 save and fp32 reload, the references, golden.json) is in hf_golden.py.

  python3 tests/reference/make_qwen_moe.py [data_dir [model ...]]
      (default tests/data, every model; name models to build only those)

The models: vocab 512, hidden 64, 2 layers, 4 query heads over 2 key/value
heads of 16, RMSNorm eps 1e-6, rotary theta 10000, 256 positions, an lm_head
of its own (untied); every layer's MLP is a sparse MoE block (decoder_sparse_step
1, mlp_only_layers []) of 8 SwiGLU experts of 64, 2 per token.
  qwen2-moe-tiny: Qwen2's biases on q, k and v; norm_topk_prob false (as
    Qwen1.5-MoE-A2.7B); a shared SwiGLU expert of 96 behind a sigmoid gate.
  qwen3-moe-tiny: no attention biases; RMSNorm over each head's 16 values of
    q and of k (q_norm, k_norm) before the rotary; norm_topk_prob true (as
    Qwen3-30B-A3B); no shared expert; head_dim 16 written explicitly.
The wide ones have the same shape but for the mixture: experts of 8 (so that
the files stay small: each expert is 3 x 8 x 64 weights)
  qwen2-moe-wide-tiny: as qwen2-moe-tiny, but 60 experts, 4 per token (as
    Qwen1.5-MoE-A2.7B), a shared expert of 32.
  qwen3-moe-wide-tiny: as qwen3-moe-tiny, but 64 experts, 8 per token.
`intermediate_size` (128) is written to config.json but unused: no layer is
dense.  Weights are random but larger than Hugging Face's initialisation
(std 0.15 for the projections and experts, 0.1 for the biases, RMSNorm
weights around 1, router weights std 0.5 so that routing is decisive), so
every part of the math, routing included, moves the logits.

The references are computed in fp32 from a fresh load of the saved fp16
weights, eager attention and eager experts, each prompt alone (positions from
0, no padding, no cache: every step recomputes the whole sequence);
golden.json lists the prompts left-padded with pad_token_id and their
attention mask, as the shared data does.  golden.json also carries
"router_topk_margin": the smallest gap, over every layer and every position
the reference computes (each prompt and its first 31 greedy tokens), between
the k-th and (k+1)-th largest router logit; the script moves to the next seed
until that gap is at least 1e-3 (ROUTER_MARGIN_MIN), so that an fp32 engine
must pick the same experts everywhere, and until every greedy step's
top1-top2 margin is at least 2e-3 (GREEDY_MARGIN_MIN), so that test_golden.c
checks all 32 tokens of every row (it stops at the first margin below 1e-3).  The script also recomputes every MoE
block from the saved tensors by the math below and checks it against Hugging
Face's block (1e-5).

The MoE block as transformers 5.25 computes it (models/qwen2_moe and
models/qwen3_moe modeling_*.py: *SparseMoeBlock, *TopKRouter, *Experts), per
token, x = post_attention_layernorm(h) (hidden 64), E = 8 experts, k = 2 (the
wide models: E = 60, k = 4 and E = 64, k = 8):
  router_logits = mlp.gate.weight @ x                      [E], no bias
  p = softmax(router_logits) over all E, in fp32 (dtype=torch.float)
  (w, idx) = topk(p, k)          largest first; torch.topk on the probabilities
  if norm_topk_prob: w = w / sum(w)      (qwen3-moe: yes; qwen2-moe: no, the
                                          raw softmax probabilities are used)
  expert e: y_e = down_e @ (silu(gate_e @ x) * (up_e @ x))
  moe = sum over the k chosen e of w_e * y_e; Hugging Face's eager experts add
        them into a zero vector in ascending expert id (not in rank order):
        for e in 0..E-1 hit by any token, out[tok] += w * y_e (index_add_)
  qwen2-moe only, shared expert:
        s = shared_expert.down_proj @ (silu(shared_expert.gate_proj @ x)
                                       * (shared_expert.up_proj @ x))  (96 wide)
        g = sigmoid(shared_expert_gate.weight @ x)   a scalar per token; the
            weight is [1, hidden], no bias
        mlp(x) = moe + g * s        (moe summed first, then the gated shared)
  qwen3-moe: mlp(x) = moe.
  Then h = h + mlp(x) (the decoder layer's residual).
In memory transformers 5.25 fuses the experts into mlp.experts.gate_up_proj
[E, 2*I, hidden] (gate rows first, then up) and mlp.experts.down_proj
[E, hidden, I]; save_pretrained splits them back to the checkpoint layout, one
[out, in] tensor per expert and projection (listed for layer 0 in the output:
model.layers.0.mlp.experts.<e>.{gate_proj,up_proj,down_proj}.weight,
model.layers.0.mlp.gate.weight [8, 64], and for qwen2-moe
model.layers.0.mlp.shared_expert.{gate_proj,up_proj,down_proj}.weight and
model.layers.0.mlp.shared_expert_gate.weight [1, 64]).

config.json spellings to note (see the saved files): qwen3_moe's config is
written with "num_local_experts" (its attribute_map maps num_experts to it),
where the published Qwen3-MoE checkpoints spell "num_experts"; both write
"rope_parameters": {"rope_theta", "rope_type"} where published checkpoints
have a top-level "rope_theta"; qwen2_moe writes "qkv_bias" and "layer_types",
qwen3_moe writes "attention_bias" and no layer_types.
"""
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import (Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_golden  # noqa: E402
from hf_golden import EOS, NEW_TOKENS  # noqa: E402

torch.set_num_threads(2)

SEED = 20251206
ROUTER_MARGIN_MIN = 1e-3
GREEDY_MARGIN_MIN = 2e-3
MAX_TRIES = 50

COMMON = dict(
    **hf_golden.TINY,  # its intermediate_size (128) unused: every layer is a MoE block
    rms_norm_eps=1e-6,
    use_sliding_window=False,
    decoder_sparse_step=1,
    mlp_only_layers=[],
)


def mixture(experts, top_k, width):
    """A mixture's config arguments: `experts` experts of `width`, top_k a token."""
    return dict(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width)


MODELS = {
    "qwen2-moe-tiny": dict(
        cls=Qwen2MoeForCausalLM,
        config=lambda: Qwen2MoeConfig(**COMMON, **mixture(8, 2, 64), norm_topk_prob=False,
                                      shared_expert_intermediate_size=96, qkv_bias=True),
        shared=True, norm_topk=False, top_k=2, seed=SEED),
    "qwen3-moe-tiny": dict(
        cls=Qwen3MoeForCausalLM,
        config=lambda: Qwen3MoeConfig(**COMMON, **mixture(8, 2, 64), norm_topk_prob=True,
                                      head_dim=16, attention_bias=False),
        shared=False, norm_topk=True, top_k=2, seed=SEED + 100),
    "qwen2-moe-wide-tiny": dict(
        cls=Qwen2MoeForCausalLM,
        config=lambda: Qwen2MoeConfig(**COMMON, **mixture(60, 4, 8), norm_topk_prob=False,
                                      shared_expert_intermediate_size=32, qkv_bias=True),
        shared=True, norm_topk=False, top_k=4, seed=SEED + 200),
    "qwen3-moe-wide-tiny": dict(
        cls=Qwen3MoeForCausalLM,
        config=lambda: Qwen3MoeConfig(**COMMON, **mixture(64, 8, 8), norm_topk_prob=True,
                                      head_dim=16, attention_bias=False),
        shared=False, norm_topk=True, top_k=8, seed=SEED + 300),
}


def make_model(spec, seed):
    cfg = spec["config"]()
    if cfg.model_type == "qwen2_moe" and getattr(cfg, "layer_types", None) is None:
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    # The routers (mlp.gate.weight) std 0.5; the shared expert's gate is a
    # projection (std 0.15).
    return hf_golden.random_model(spec["cls"], cfg, seed, router_std=0.5)


class Capture:
    """Forward hooks on every layer's MoE block: its input, output and router logits."""

    def __init__(self, model):
        self.calls, self.handles = [], []
        for i, layer in enumerate(model.model.layers):
            self.handles.append(layer.mlp.register_forward_hook(
                lambda m, a, out, i=i: self.calls.append(("mlp", i, a[0].detach().clone(),
                                                         out.detach().clone()))))
            self.handles.append(layer.mlp.gate.register_forward_hook(
                lambda m, a, out, i=i: self.calls.append(("router", i, out[0].detach().clone()))))

    def reset(self):
        self.calls = []

    def remove(self):
        for h in self.handles:
            h.remove()


def silu(x):
    return x * torch.sigmoid(x)


def moe_by_hand(sd, layer, x, shared, norm_topk, top_k):
    """The MoE block from the saved tensors, by the math in the docstring.
    x: [tokens, hidden] fp32.  Returns (out, router_logits)."""
    p = f"model.layers.{layer}.mlp."
    f = lambda n: sd[p + n].float()
    logits = x @ f("gate.weight").T
    prob = torch.softmax(logits, dim=-1, dtype=torch.float32)
    w, idx = torch.topk(prob, top_k, dim=-1)
    if norm_topk:
        w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for e in sorted(int(i) for i in idx[t]):  # ascending expert id, as HF's index_add_
            r = int((idx[t] == e).nonzero()[0, 0])
            xe = x[t]
            y = f(f"experts.{e}.down_proj.weight") @ (
                silu(f(f"experts.{e}.gate_proj.weight") @ xe) * (f(f"experts.{e}.up_proj.weight") @ xe))
            out[t] += w[t, r] * y
    if shared:
        s = (silu(x @ f("shared_expert.gate_proj.weight").T) * (x @ f("shared_expert.up_proj.weight").T)) \
            @ f("shared_expert.down_proj.weight").T
        g = torch.sigmoid(x @ f("shared_expert_gate.weight").T)  # [tokens, 1]
        out = out + g * s
    return out, logits


def build(out, spec, seed):
    saved = hf_golden.save_fp16(make_model(spec, seed), out)
    if saved["model_type"] == "qwen2_moe":
        assert saved.get("layer_types") == ["full_attention"] * 2, saved.get("layer_types")
    sd = load_file(os.path.join(out, "model.safetensors"))

    model = hf_golden.load_fp32(spec["cls"], out, experts_implementation="eager")
    cap = Capture(model)
    rows = hf_golden.prompts(seed)
    top_k = spec["top_k"]
    router_low = (float("inf"), None)
    hand_err = 0.0

    def step(model, ids):
        # Only the last step's captures are kept: its sequence covers every
        # position the reference computes.
        cap.reset()
        return hf_golden.last_logits(model, ids)

    def after_row(r, p):
        """The router logits and MoE block inputs/outputs of row r's last step."""
        nonlocal router_low, hand_err
        for c in cap.calls:
            if c[0] == "router":
                _, layer, rl = c
                srt = torch.sort(rl.float(), dim=-1, descending=True).values
                gap = srt[:, top_k - 1] - srt[:, top_k]
                pos = int(torch.argmin(gap))
                if float(gap[pos]) < router_low[0]:
                    router_low = (float(gap[pos]), {"row": r, "layer": layer, "position": pos})
            else:
                _, layer, x, y = c
                x = x.reshape(-1, x.shape[-1]).float()
                mine, _ = moe_by_hand(sd, layer, x, spec["shared"], spec["norm_topk"], top_k)
                hand_err = max(hand_err, float((mine - y.reshape(-1, y.shape[-1])).abs().max()))

    logits, greedy, margin, top5 = hf_golden.references(model, rows, step, after_row)
    cap.remove()
    ok = (all(EOS not in t for t in greedy) and router_low[0] >= ROUTER_MARGIN_MIN
          and min(min(m) for m in margin) >= GREEDY_MARGIN_MIN)
    return dict(ok=ok, saved=saved, sd=sd, rows=rows, logits=logits, greedy=greedy,
                margin=margin, top5=top5, router_low=router_low, hand_err=hand_err,
                arch=saved["architectures"][0], top_k=top_k)


def write(out, res, seed):
    low, where = res["router_low"]
    top_k = res["top_k"]
    extra = {
        "router_topk_margin": {
            "doc": f"smallest gap between the {top_k}th and {top_k + 1}th largest router logit "
                   "over every layer and every position of each row alone (the prompt and its "
                   f"first {NEW_TOKENS - 1} greedy tokens); position counts from the row's first "
                   "prompt token",
            "min": low, **where, "seed": seed,
        },
    }
    text = hf_golden.describe(res["arch"], compute=", eager attention and experts")
    hf_golden.write_golden(out, text, res["rows"], res["logits"], res["greedy"], res["margin"],
                           res["top5"], extra)


def report(out, res, seed):
    lg = torch.stack(res["logits"])
    low, where = res["router_low"]
    print(f"== {out} ({res['arch']}, seed {seed})")
    print(f"prefill logits in [{float(lg.min()):.3f}, {float(lg.max()):.3f}], smallest greedy "
          "margin per row " + ", ".join(f"{min(m):.4f}" for m in res["margin"]))
    print(f"router top-{res['top_k']} margin (k-th minus (k+1)-th logit): min {low:.6f} at {where}")
    print(f"MoE block by hand from the saved tensors vs Hugging Face: max |diff| {res['hand_err']:.2e}")
    print("layer 0 tensors in model.safetensors:")
    for n in sorted(k for k in res["sd"] if k.startswith("model.layers.0.")):
        print(f"  {n} {list(res['sd'][n].shape)} {str(res['sd'][n].dtype).replace('torch.', '')}")
    print("other tensors: " + ", ".join(
        f"{n} {list(res['sd'][n].shape)}" for n in sorted(res["sd"]) if not n.startswith("model.layers.")))
    print("config.json:")
    with open(os.path.join(out, "config.json")) as f:
        print(f.read())
    print("files: " + ", ".join(f"{n} {os.path.getsize(os.path.join(out, n))}"
                                for n in sorted(os.listdir(out))))


def main():
    data = hf_golden.out_dir()
    names = sys.argv[2:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit(f"{name}: not a model of this script ({', '.join(MODELS)})")
    for name in names:
        spec = MODELS[name]
        out = os.path.join(data, name)
        for seed in range(spec["seed"], spec["seed"] + MAX_TRIES):
            res = build(out, spec, seed)
            if res["ok"]:
                break
            print(f"{name}: seed {seed} rejected (router margin {res['router_low'][0]:.2e}, "
                  f"greedy margin {min(min(m) for m in res['margin']):.2e}, "
                  f"eos in greedy: {any(EOS in t for t in res['greedy'])})")
        else:
            sys.exit(f"{name}: no seed in {MAX_TRIES} met the margins")
        assert res["hand_err"] < 1e-5, res["hand_err"]
        write(out, res, seed)
        report(out, res, seed)


if __name__ == "__main__":
    main()
