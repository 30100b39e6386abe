#!/usr/bin/env python3
"""bench/hf_score.py - the Hugging Face baseline for scoring: N prompts of L
random token ids (a fixed seed, bos first) through transformers' forward,
then an fp32 log-softmax and a gather of each next token's log-probability,
as lm-evaluation-harness's `hf` model scores a request; at each batch size
given, prompt tokens/s, and the best.  Random fp16 weights on the GPU (the
speed does not depend on them); the configurations are written out here
because the GPU machine reaches no model hub.

  python3 bench/hf_score.py --model opt-6.7b --n 1024 --len 512 --batch 8,16,32,64

With --input FILE (run-batch JSONL, e.g. bench/mmlu_shape.py's), the prompts
of its lines instead, each scored on its own as the harness's `hf` model
does: longest first, right-padded in batches (an attention mask), every
position's log-probability taken; the rate counts the prompts' own tokens.
"""
import json
import argparse
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

MODELS = {
    "opt-6.7b": (OPTForCausalLM, lambda: OPTConfig(
        hidden_size=4096, num_hidden_layers=32, ffn_dim=16384, num_attention_heads=32,
        vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=4096)),
    "opt-30b": (OPTForCausalLM, lambda: OPTConfig(
        hidden_size=7168, num_hidden_layers=48, ffn_dim=28672, num_attention_heads=56,
        vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=7168)),
    "llama-3-8b": (LlamaForCausalLM, lambda: LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5)),
}


def score(model, ids, bs):
    """Every prompt's summed log-probability of its tokens after the first."""
    out = []
    with torch.inference_mode():
        for i in range(0, ids.shape[0], bs):
            x = ids[i:i + bs].cuda(non_blocking=True)
            logits = model(x).logits
            lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            out.append(lp.gather(-1, x[:, 1:, None]).squeeze(-1).sum(-1).cpu())
    return torch.cat(out)


def score_ragged(model, prompts, bs):
    """Each prompt's summed log-probability, longest first, batches of bs."""
    out = []
    with torch.inference_mode():
        for i in range(0, len(prompts), bs):
            part = prompts[i:i + bs]
            n = max(len(p) for p in part)
            x = torch.zeros((len(part), n), dtype=torch.long)
            mask = torch.zeros((len(part), n), dtype=torch.long)
            for r, p in enumerate(part):
                x[r, :len(p)] = torch.tensor(p)
                mask[r, :len(p)] = 1
            x, mask = x.cuda(non_blocking=True), mask.cuda(non_blocking=True)
            logits = model(input_ids=x, attention_mask=mask).logits
            lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            lp = lp.gather(-1, x[:, 1:, None]).squeeze(-1) * mask[:, 1:]
            out.append(lp.sum(-1).cpu())
    return torch.cat(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--batch", default="8,16,32,64")
    ap.add_argument("--input", help="run-batch JSONL whose prompt_token_ids to score")
    a = ap.parse_args()
    prompts = None
    if a.input:
        with open(a.input) as f:
            prompts = [json.loads(line)["prompt_token_ids"] for line in f if line.strip()]
        prompts.sort(key=len, reverse=True)
        total = sum(len(p) for p in prompts)
    cls, cfg = MODELS[a.model]
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float16)
    with torch.device("cuda"):
        model = cls(cfg()).eval()
    g = torch.Generator().manual_seed(17)
    ids = torch.randint(4, 30000, (a.n, a.len), generator=g)
    ids[:, 0] = 2
    ids = ids.pin_memory()
    best = (0.0, 0)
    for bs in [int(b) for b in a.batch.split(",")]:
        try:
            if prompts:
                score_ragged(model, prompts[:bs], bs)  # warm up at the longest
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                score_ragged(model, prompts, bs)
            else:
                score(model, ids[:bs], bs)  # warm up: kernels chosen, memory pooled
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                score(model, ids, bs)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        except torch.OutOfMemoryError:
            print(f"hf_score {a.model}: batch {bs}: out of GPU memory", flush=True)
            torch.cuda.empty_cache()
            continue
        if prompts:
            rate = total / dt
            print(f"hf_score {a.model}: batch {bs}: {len(prompts)} prompts, {total} ids in "
                  f"{dt:.2f} s: {rate:.0f} prompt tokens/s", flush=True)
        else:
            rate = a.n * a.len / dt
            print(f"hf_score {a.model}: batch {bs}: {a.n} x {a.len} ids in {dt:.2f} s: "
                  f"{rate:.0f} prompt tokens/s", flush=True)
        best = max(best, (rate, bs))
    if not best[1]:
        sys.exit("hf_score: no batch size fit")
    print(f"hf_score {a.model}: best {best[0]:.0f} prompt tokens/s at batch {best[1]} "
          f"(torch {torch.__version__}, {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
