#!/usr/bin/env python3
"""Score run-batch's answers (OpenAI Batch output lines) against the CSV's
labels: how many pairs got an answer, how many a Yes or No, and the accuracy.

usage: score.py PAIRS.csv results.jsonl"""
import csv
import json
import sys


def answer(line):
    """The first word of the completion: Yes, No, or what the model said."""
    out = json.loads(line)
    if out.get("error") or not out.get("response"):
        return out["custom_id"], None
    text = out["response"]["body"]["choices"][0]["text"].strip()
    return out["custom_id"], (text.split() or [""])[0].strip(".,!").capitalize()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        labels = {f"pair-{i}": row["same"] for i, row in enumerate(csv.DictReader(f), 1)}
    with open(sys.argv[2]) as f:
        answers = dict(answer(line) for line in f)
    missing = sorted(set(labels) - set(answers), key=lambda k: int(k.split("-")[1]))
    if missing or len(answers) != len(labels):
        sys.exit(f"score.py: {len(answers)} answers for {len(labels)} pairs; missing: {missing[:5]}")
    failed = sum(a is None for a in answers.values())
    yes_no = sum(a in ("Yes", "No") for a in answers.values())
    right = sum(answers[k] == v for k, v in labels.items())
    print(f"{len(labels)} pairs, {failed} failed, {yes_no} answered Yes/No, "
          f"accuracy {100.0 * right / len(labels):.1f}%")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
