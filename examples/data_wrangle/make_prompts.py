#!/usr/bin/env python3
"""Entity matching as FlexGen's data-wrangling example does it: each pair of
product records in a CSV becomes a few-shot prompt ("are these the same
product? Yes/No"), one OpenAI Batch API line per pair, for fgcore run-batch.

usage: make_prompts.py PAIRS.csv > requests.jsonl"""
import csv
import json
import sys

# Demonstrations that come before every question (not pairs of the CSV).
SHOTS = [
    (("Apple AirPods Pro 2nd Gen", "249.00"), ("AirPods Pro (2nd generation)", "239.99"), "Yes"),
    (("HP LaserJet Pro M404n", "299.99"), ("HP LaserJet Pro M428fdw", "429.99"), "No"),
]


def record(title, price):
    return f"title: {title}; price: {price}"


def prompt(a, b):
    lines = []
    for x, y, answer in SHOTS:
        lines.append(f"Product A is {record(*x)}. Product B is {record(*y)}. "
                     f"Are Product A and Product B the same? {answer}")
    lines.append(f"Product A is {record(*a)}. Product B is {record(*b)}. "
                 "Are Product A and Product B the same?")
    return "\n\n".join(lines)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        for i, row in enumerate(csv.DictReader(f), 1):
            body = {"prompt": prompt((row["title_a"], row["price_a"]),
                                     (row["title_b"], row["price_b"])),
                    "max_tokens": 2, "temperature": 0}
            print(json.dumps({"custom_id": f"pair-{i}", "method": "POST",
                              "url": "/v1/completions", "body": body}))


if __name__ == "__main__":
    main()
