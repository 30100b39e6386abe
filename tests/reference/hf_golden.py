"""The parts shared by the scripts that build a tiny random Hugging Face
checkpoint and Hugging Face's own outputs for it in the format of the shared
reference data (FGCORE_TESTDATA's README: golden.json and
golden_prefill_last_logits.f32): make_qwen2.py, make_window.py and
make_qwen_moe.py.  Each of those keeps what is its own (the configs, the
checks of its model's math); this module holds what they do alike:

  - the random weights, larger than Hugging Face's initialisation (std 0.15
    for the projections, 0.1 for the biases, RMSNorm weights around 1,
    embeddings std 1; optionally another std for MoE routers),
  - the prompts (lengths 25, 10, 17, 6, ids above pad, bos and eos),
  - the fp16 save and the fresh fp32 load (eager attention) of the saved
    weights,
  - the references: each prompt alone (positions from 0, no padding, no
    cache: every step recomputes the whole sequence), prefill logits, greedy
    tokens, top1-top2 margins and the top-5 of every step,
  - golden.json (the prompts left-padded with pad_token_id and their
    attention mask, as the shared data does) and the prefill logits file.

Only the making of the data needs Python, torch and transformers; the
engine and its tests never import this.
"""
import json
import os
import sys

import torch
import transformers

VOCAB = 512
PAD, BOS, EOS = 0, 1, 2
PROMPT_LENS = (25, 10, 17, 6)
NEW_TOKENS = 32

# The shape all the tiny models share (config.json is written with sorted
# keys, so where these stand among a config's arguments does not matter):
# vocab 512, hidden 64, 2 layers, 4 query heads over 2 key/value heads of 16,
# SwiGLU 128, rotary theta 10000, 256 positions, an lm_head of its own.
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    tie_word_embeddings=False,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
)

HERE = os.path.dirname(os.path.abspath(__file__))


def out_dir(*default):
    """The output folder: the script's first argument, else tests/data/<default...>."""
    return sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "data", *default)


def random_model(cls, cfg, seed, router_std=None):
    """cls(cfg) with its weights drawn again from seed, larger than Hugging
    Face's initialisation; router_std, when given, is the std of every
    mlp.gate.weight (an MoE router)."""
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # layer norms, final norm, q_norm, k_norm
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif router_std is not None and name.endswith("mlp.gate.weight"):
                p.copy_(router_std * torch.randn(p.shape, generator=g))
            else:  # projections (experts included), lm_head
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
    return model


def prompts(seed):
    g = torch.Generator().manual_seed(seed + 1)
    # Ids above the special ones, so that no prompt holds pad, bos or eos.
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENS]


def save_fp16(model, out):
    """Save the model in fp16 into out; return the config.json it wrote."""
    os.makedirs(out, exist_ok=True)
    model.half().save_pretrained(out)
    with open(os.path.join(out, "config.json")) as f:
        return json.load(f)


def load_fp32(cls, out, **kw):
    """A fresh fp32 load of the saved fp16 weights, eager attention."""
    return cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                               **kw).eval()


def last_logits(model, ids):
    return model(torch.tensor([ids])).logits[0, -1].float()


def reference(model, prompt, logits_of=last_logits):
    """Prefill logits, greedy tokens, margins and top-5 for one prompt alone;
    logits_of(model, ids) gives the last position's fp32 logits."""
    ids = list(prompt)
    tokens, margins, top5, prefill = [], [], [], None
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = logits_of(model, ids)
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


def references(model, rows, logits_of=last_logits, after_row=None):
    """reference() for every row: (logits, greedy, margin, top5), a list each;
    after_row(r, prompt), when given, is called after row r."""
    logits, greedy, margin, top5 = [], [], [], []
    for r, p in enumerate(rows):
        l, t, m, k = reference(model, p, logits_of)
        logits.append(l)
        greedy.append(t)
        margin.append(m)
        top5.append(k)
        if after_row is not None:
            after_row(r, p)
    return logits, greedy, margin, top5


def describe(arch, compute="", rest=""):
    """golden.json's "reference": compute is said after the weights, rest at the end."""
    return (f"transformers {transformers.__version__} {arch}, fp32 compute "
            f"from the fp16 weights in model.safetensors{compute}; each row computed alone "
            f"(positions from 0, no padding){rest}")


def write_golden(out, reference_text, rows, logits, greedy, margin, top5, extra=None):
    """golden.json (keys of extra, when given, after the shared ones) and
    golden_prefill_last_logits.f32 into out."""
    plen = max(len(p) for p in rows)
    golden = {
        "reference": reference_text,
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
    golden.update(extra or {})
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    torch.stack(logits).numpy().astype("<f4").tofile(
        os.path.join(out, "golden_prefill_last_logits.f32"))
