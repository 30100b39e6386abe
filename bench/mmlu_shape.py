#!/usr/bin/env python3
"""bench/mmlu_shape.py - an MMLU-shaped scoring job as run-batch JSONL, in
lm-evaluation-harness's loglikelihood shape (echo, logprobs 1, max_tokens 1):
SUBJECTS subjects x QUESTIONS questions x 4 one-token choices; each prompt is
its subject's 5-shot header (HEADER random token ids, bos first), then its
question (QUESTION ids, +-20 %), then the choice.  Fixed seed: every run
writes the same lines.

  python3 bench/mmlu_shape.py [--subjects 57] [--questions 100] [--header 600]
                              [--question 100] [--vocab 30000] > mmlu.jsonl
"""
import argparse
import json
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subjects", type=int, default=57)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--header", type=int, default=600)
    ap.add_argument("--question", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=30000, help="ids below this")
    a = ap.parse_args()
    rng = random.Random(57)
    for s in range(a.subjects):
        header = [2] + [rng.randint(4, a.vocab - 1) for _ in range(a.header - 1)]
        for q in range(a.questions):
            n = rng.randint(a.question * 4 // 5, a.question * 6 // 5)
            question = [rng.randint(4, a.vocab - 1) for _ in range(n)]
            for c, choice in enumerate((317, 387, 347, 360)):  # OPT's " A" .. " D"
                print(json.dumps({"custom_id": f"s{s}q{q}c{c}",
                                  "prompt_token_ids": header + question + [choice],
                                  "max_tokens": 1, "echo": True, "logprobs": 1}))


if __name__ == "__main__":
    main()
