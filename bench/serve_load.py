#!/usr/bin/env python3
"""bench/serve_load.py - throughput of `fgcore serve` under concurrent clients
against the same requests sent one at a time.

Starts `fgcore serve` (--port 0) with the given configuration, sends
CLIENTS x REQUESTS greedy completions from CLIENTS threads at once (each
thread one request after another), then the same requests sequentially, and
prints completion tokens per second of both, the errors (there must be none)
and whether every greedy text came out the same both ways.  With
--long-every K, every K-th request asks for --long-tokens new tokens (the
others --max-tokens): the p50 latency of the short requests under the load
is printed beside their p50 sent alone (the sequential pass).  Standard
library only.

  python3 bench/serve_load.py --fgcore _build/dev/fgcore \\
      -o model.path=$FGCORE_TESTDATA/opt/opt-py-128x4 \\
      -o policy.gpu_batch_size=32 -o policy.num_gpu_batches=2
"""
import argparse
import http.client
import json
import re
import subprocess
import sys
import threading
import time

PROMPTS = ["def main(", "import os\n", "class Foo:\n    def ", "for i in range(",
           "return x +", "# compute the", "if __name__ ==", "x = [1, 2,",
           "while True:\n    ", "with open(path) as f:\n", "try:\n    import numpy",
           "print(\"hello"]


def start(fgcore, sets):
    cmd = [fgcore]
    for s in sets:
        cmd += ["-o", s]
    proc = subprocess.Popen(cmd + ["-q", "serve", "--port", "0"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    for line in proc.stderr:
        m = re.search(r"listening on http://[^ ]*:(\d+) ", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    sys.exit("serve did not start")


def budget(k, a):
    return a.long_tokens if a.long_every and k % a.long_every == 0 else a.max_tokens


def body(k, a):
    p = PROMPTS[k % len(PROMPTS)] * (1 + k % 3)
    return json.dumps({"prompt": p, "max_tokens": budget(k, a), "temperature": 0,
                       "ignore_eos": True}).encode()


class Client:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def send(self, data):
        """(completion tokens, text) or (None, why)."""
        try:
            self.c.request("POST", "/v1/completions", data, {"Content-Type": "application/json"})
            r = self.c.getresponse()
            raw = r.read()
            if r.status != 200:
                return None, f"{r.status} {raw[:200]!r}"
            o = json.loads(raw)
            return o["usage"]["completion_tokens"], o["choices"][0]["text"]
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.c.close()
            return None, repr(e)


def concurrent(port, clients, per_client, a, lat):
    texts, errors, tokens = {}, [], [0]
    lock = threading.Lock()

    def run(i):
        cl = Client(port)
        for j in range(per_client):
            k = i * per_client + j
            t0 = time.monotonic()
            n, t = cl.send(body(k, a))
            with lock:
                lat[k] = time.monotonic() - t0
                if n is None:
                    errors.append(t)
                else:
                    tokens[0] += n
                    texts[k] = t
    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, tokens[0], errors, texts


def sequential(port, n, a, lat):
    texts, errors, tokens = {}, [], 0
    cl = Client(port)
    t0 = time.monotonic()
    for k in range(n):
        t1 = time.monotonic()
        got, t = cl.send(body(k, a))
        lat[k] = time.monotonic() - t1
        if got is None:
            errors.append(t)
        else:
            tokens += got
            texts[k] = t
    return time.monotonic() - t0, tokens, errors, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fgcore", required=True, help="the fgcore program")
    ap.add_argument("-o", dest="sets", action="append", default=[],
                    help="section.key=value for serve (repeatable)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=8, help="per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--long-every", type=int, default=0,
                    help="every K-th request is a long one (0: none)")
    ap.add_argument("--long-tokens", type=int, default=512)
    a = ap.parse_args()
    proc, port = start(a.fgcore, a.sets)
    clat, slat = {}, {}
    try:
        n = a.clients * a.requests
        ct, ctok, cerr, ctexts = concurrent(port, a.clients, a.requests, a, clat)
        st, stok, serr, stexts = sequential(port, n, a, slat)
    finally:
        proc.terminate()
        rc = proc.wait(120)
    same = sum(ctexts.get(k) == stexts.get(k) and k in ctexts for k in range(n))
    print(f"concurrent: {a.clients} clients x {a.requests} requests: {ctok} tokens in {ct:.2f} s"
          f" = {ctok / ct:.1f} tokens/s, {len(cerr)} errors")
    print(f"sequential: {n} requests: {stok} tokens in {st:.2f} s = {stok / st:.1f} tokens/s,"
          f" {len(serr)} errors")
    print(f"speed-up {ctok / ct / (stok / st):.2f}x; greedy texts equal both ways: {same}/{n};"
          f" serve exited {rc}")
    if a.long_every:
        short = [k for k in range(n) if budget(k, a) == a.max_tokens]
        pc = sorted(clat[k] for k in short)[len(short) // 2]
        ps = sorted(slat[k] for k in short)[len(short) // 2]
        print(f"short requests ({len(short)} of {n}, {a.max_tokens} tokens; the others "
              f"{a.long_tokens}): p50 latency {pc * 1e3:.1f} ms under the load, "
              f"{ps * 1e3:.1f} ms alone: {pc / ps:.2f}x")
    for e in (cerr + serr)[:5]:
        print("error:", e)
    return 0 if not cerr and not serr and same == n and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
