#!/usr/bin/env python3
"""tests/test_serve_join.py - `fgcore serve` admits requests into the batch
it is running (continuous batching), on the trained opt-py-128x4.

A long greedy request runs; short ones sent while it runs must be answered
before it ends (they join its batch between decode steps), with the same
tokens as each sent alone.  With [policy] refill = 0 (no joins) the same
short request waits for the long one.  A sampled request joins too, with
the seeded tokens it gets alone."""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import Server, check, failures, stop_all  # noqa: E402

LONG = {"prompt": "def main(", "max_tokens": 1000, "ignore_eos": True, "temperature": 0}
SHORTS = [{"prompt": p, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
          for p in ("import os\n", "class Foo:\n    def ", "for i in range(")]
SAMPLED = {"prompt": "x = [1, 2,", "max_tokens": 5, "temperature": 0.8, "seed": 7,
           "ignore_eos": True}


def ask(s, body):
    status, raw = s.post(body)
    check(status == 200, f"{body['prompt']!r}: status {status}: {raw[:200]!r}")
    return json.loads(raw) if status == 200 else None


def text(o):
    return o["choices"][0]["text"] if o else None


def during_long(s, bodies):
    """The long request, streamed, and each of bodies sent one after another
    once its first tokens are out (it is decoding): (its text, its first
    token's and its end's times, [(answer, sent, answered)])."""
    out = {"text": ""}
    started = threading.Event()

    def long():
        c = s.conn()
        try:
            c.request("POST", "/v1/completions", json.dumps({**LONG, "stream": True}),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            check(r.status == 200, f"the long request: status {r.status}")
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                out["text"] += json.loads(line[6:])["choices"][0]["text"]
                out.setdefault("first", time.monotonic())
                started.set()
            out["end"] = time.monotonic()
        finally:
            started.set()
            c.close()
    t = threading.Thread(target=long)
    t.start()
    started.wait(120)
    got = []
    for b in bodies:
        t0 = time.monotonic()
        o = ask(s, b)
        got.append((o, t0, time.monotonic()))
    t.join(300)
    return {"choices": [{"text": out["text"]}]}, out.get("first"), out.get("end"), got


def main():
    cfg = ["-o", "policy.gpu_batch_size=4", "-o", "policy.num_gpu_batches=1",
           "-o", "serve.max_wait_ms=0", "-o", "serve.join_wait_ms=100"]
    s = Server(config=cfg)
    try:
        alone = [text(ask(s, b)) for b in SHORTS]
        sampled_alone = text(ask(s, SAMPLED))
        long_alone = text(ask(s, LONG))
        t0 = time.monotonic()
        ask(s, SHORTS[0])
        short_s = time.monotonic() - t0
        lo, lo_first, lo_end, got = during_long(s, SHORTS + [SAMPLED])
        check(text(lo) == long_alone, "the long request's text changed with others joining")
        for (o, sent, end), want, b in zip(got, alone + [sampled_alone], SHORTS + [SAMPLED]):
            check(text(o) == want, f"{b['prompt']!r}: {text(o)!r} while the long one ran, "
                                   f"{want!r} alone")
        # (the long one's end is seen late, never early: its stream may lag)
        for (o, sent, end), b in zip(got[:-1], SHORTS):
            check(end < lo_end, f"{b['prompt']!r} was answered after the long request "
                                f"ended: it did not join its batch")
        print(f"short alone {short_s * 1e3:.0f} ms; {len(SHORTS)} short requests answered "
              f"while the long one ran ({(lo_end - got[len(SHORTS) - 1][2]) * 1e3:.0f} ms "
              f"before it ended); the sampled one as alone")
    finally:
        s.stop()
    # without joins, a short request waits for the long one: sent as it
    # began, it takes more than half of the long one's time
    s = Server(config=cfg + ["-o", "policy.refill=0"])
    try:
        lo, lo_first, lo_end, got = during_long(s, SHORTS[:1])
        o, sent, end = got[0]
        check(end - sent > 0.5 * (lo_end - lo_first),
              f"with policy.refill=0 a short request took {(end - sent) * 1e3:.0f} ms of the "
              f"long one's {(lo_end - lo_first) * 1e3:.0f} ms: it did not wait for it")
        check(text(o) == alone[0], "policy.refill=0: a short request's text changed")
    finally:
        s.stop()
    stop_all()
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("all serve join checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
