#!/usr/bin/env python3
"""tests/compare_scores.py - two run-batch outputs of the same requests (plain
lines with echo and logprobs) agree: every line's tokens and top ids the
same, its log-probabilities within TOL.

  python3 tests/compare_scores.py A.jsonl B.jsonl TOL

Prints the largest difference; exit 1 when a line differs or exceeds TOL.
"""
import json
import sys


def lines(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            out[rec["custom_id"]] = rec
    return out


def main():
    a, b, tol = lines(sys.argv[1]), lines(sys.argv[2]), float(sys.argv[3])
    worst, bad = 0.0, []
    if sorted(a) != sorted(b):
        bad.append("the two outputs hold different lines")
    for cid in sorted(set(a) & set(b)):
        x, y = a[cid], b[cid]
        if "error" in x or "error" in y or "logprobs" not in x or "logprobs" not in y:
            bad.append(f"{cid}: an error or no logprobs")
            continue
        if x["token_ids"] != y["token_ids"]:
            bad.append(f"{cid}: tokens {x['token_ids']} against {y['token_ids']}")
        lx, ly = x["logprobs"], y["logprobs"]
        if lx["tokens"] != ly["tokens"] or len(lx["token_logprobs"]) != len(ly["token_logprobs"]):
            bad.append(f"{cid}: the scored tokens differ")
            continue
        for i, (u, v) in enumerate(zip(lx["token_logprobs"], ly["token_logprobs"])):
            if (u is None) != (v is None):
                bad.append(f"{cid}: position {i} scored in one only")
            elif u is not None:
                worst = max(worst, abs(u - v))
        for i, (u, v) in enumerate(zip(lx["top_logprobs"], ly["top_logprobs"])):
            if (u is None) != (v is None) or (u and sorted(u) != sorted(v)):
                # near-ties may swap places within the tolerance
                if u and v and all(abs(u[k] - v.get(k, -1e9)) <= tol for k in u if k in v):
                    continue
                bad.append(f"{cid}: position {i}: top {u} against {v}")
            elif u:
                worst = max(worst, max(abs(u[k] - v[k]) for k in u))
    for line in bad[:10]:
        print(line)
    print(f"{len(a)} lines, largest log-probability difference {worst:.3g} (tolerance {tol:g})"
          f"{', %d differ' % len(bad) if bad else ''}")
    sys.exit(1 if bad or worst > tol else 0)


if __name__ == "__main__":
    main()
