#!/usr/bin/env python3
"""bench/hf_generate.py - the Hugging Face baseline for generation: transformers'
`generate()` (greedy, exactly GEN new tokens a row) over a batch of random
prompts of LEN ids, all on the GPU in fp16 with random weights; at each batch
size given, FlexGen's generation throughput (new tokens / the whole call,
prefill included), and the best.  The configurations are the published ones
(each model's config.json), written out here because the GPU machine reaches
no model hub; the speed does not depend on the weights.

  python3 bench/hf_generate.py --model qwen3-8b --len 512 --gen 32 --batch 16,32,64,128
"""
import argparse
import sys
import time

import torch
import transformers as tf

MODELS = {
    "llama-3-8b": lambda: tf.LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
        rope_theta=500000.0, rms_norm_eps=1e-5),
    "mistral-7b": lambda: tf.MistralConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
        rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=4096),
    "qwen2-7b": lambda: tf.Qwen2Config(
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen3-8b": lambda: tf.Qwen3Config(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "gemma-2-9b": lambda: tf.Gemma2Config(
        hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
        rope_theta=10000.0, rms_norm_eps=1e-6, query_pre_attn_scalar=256, sliding_window=4096,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh"),
    # 93 GB of fp16 weights: an H200 only
    "mixtral-8x7b": lambda: tf.MixtralConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-5, num_local_experts=8, num_experts_per_tok=2),
}


def run(model, ids, gen):
    """One generate() of exactly gen new tokens a row; its seconds."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=gen, min_new_tokens=gen, do_sample=False,
                             pad_token_id=0)
    torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + gen, out.shape
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--batch", default="16,32,64,128")
    a = ap.parse_args()
    cfg = MODELS[a.model]()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float16)
    with torch.device("cuda"):
        model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    for p in model.parameters():  # small weights: fp16 stays finite through the layers
        p.data.normal_(0.0, 0.02)
    g = torch.Generator().manual_seed(17)
    best = (0.0, 0)
    for bs in [int(b) for b in a.batch.split(",")]:
        ids = torch.randint(4, 30000, (bs, a.len), generator=g).cuda()
        try:
            run(model, ids[:, :16], 2)  # warm up: kernels chosen, memory pooled
            dt = run(model, ids, a.gen)
        except torch.OutOfMemoryError:
            print(f"hf_generate {a.model}: batch {bs}: out of GPU memory", flush=True)
            torch.cuda.empty_cache()
            continue
        rate = bs * a.gen / dt
        print(f"hf_generate {a.model}: batch {bs}: {bs} x ({a.len} + {a.gen}) in {dt:.2f} s: "
              f"{rate:.1f} generated tok/s", flush=True)
        best = max(best, (rate, bs))
    if not best[1]:
        sys.exit("hf_generate: no batch size fit")
    print(f"hf_generate {a.model}: best {best[0]:.1f} generated tok/s at batch {best[1]} "
          f"(torch {torch.__version__}, transformers {tf.__version__}, "
          f"{torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
