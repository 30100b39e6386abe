#!/usr/bin/env python3
"""tests/test_serve_hostile.py - `fgcore serve` against hostile clients, on
the trained opt-py-128x4, over loopback only.

300 connections that send nothing or a byte now and then are held while a
good client's requests must keep succeeding; [serve] request_timeout_s cuts
a connection that has not delivered a whole request in time but never one
whose request is queued; max_connections_per_ip refuses an address's extra
connections; pipelined requests are all answered; long text prompts are
tokenized off the engine thread (other requests run meanwhile); a
shutdown is not held by
a client that sent half a body, and a hard stop (drain_timeout_s, or a
second signal) drops the batch in flight between decode steps instead of
finishing it.  Servers, skips and the watchdog are tests/test_serve.py's;
every wait here is bounded."""
import http.client
import json
import os
import re
import select
import signal
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import test_serve as ts  # noqa: E402 (exits 77 when FGCORE_TESTDATA is unset)

check, fail = ts.check, ts.fail
signal.alarm(int(os.environ.get("FGCORE_SERVE_TEST_TIMEOUT", "300")))


def closed_by_server(sk, timeout):
    """Seconds until the server closes sk (EOF or reset), or None."""
    t0 = time.monotonic()
    sk.settimeout(0.05)
    while time.monotonic() - t0 < timeout:
        try:
            if sk.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def good_request(s, prompt="def main(", path="/v1/completions"):
    """(status, seconds) of one completion on a fresh connection."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
    try:
        c.request("POST", path, json.dumps({"prompt": prompt, "max_tokens": 4}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status, time.monotonic() - t0
    except (OSError, http.client.HTTPException) as e:
        return repr(e), time.monotonic() - t0
    finally:
        c.close()


class Hostile:
    """n connections from src: half send nothing, half drip a request line
    a byte every period seconds; a connection the server closes is opened
    again, so n are held the whole time."""

    def __init__(self, port, n, src="127.0.0.1", period=0.5):
        self.port, self.src, self.period = port, src, period
        self.socks = [self.open(i) for i in range(n)]
        self.reopened = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def open(self, i):
        sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sk.bind((self.src, 0))
        sk.settimeout(5)
        sk.connect(("127.0.0.1", self.port))
        sk.setblocking(False)
        return sk

    def run(self):
        line = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 100000
        pos = 0
        while not self.done.wait(self.period):
            for i, sk in enumerate(self.socks):
                try:
                    gone = select.select([sk], [], [], 0)[0] and sk.recv(4096) == b""
                    if not gone and i % 2:
                        sk.send(line[pos:pos + 1])
                except OSError:
                    gone = True
                if gone:
                    sk.close()
                    try:
                        self.socks[i] = self.open(i)
                        self.reopened += 1
                    except OSError:
                        pass
            pos += 1

    def close(self):
        self.done.set()
        self.thread.join(30)
        for sk in self.socks:
            sk.close()


def test_slow_loris():
    """The defaults (max_connections 256): 300 idle and dripping connections
    from the good client's own address cannot lock it out."""
    s = ts.Server()
    h = Hostile(s.port, 300)
    try:
        time.sleep(1)
        results, t0 = [], time.monotonic()
        while time.monotonic() - t0 < 6:
            results.append(good_request(s))
            results.append((s.get("/health")[0], 0))
            if results[-1][0] != 200 or results[-2][0] != 200:
                time.sleep(0.1)  # refused: no need to hammer
        bad = [r for r in results if r[0] != 200]
        slow = max(t for _, t in results)
        check(not bad, f"{len(bad)} of {len(results)} good requests failed beside 300 hostile "
              f"connections: {bad[:5]}")
        check(slow < 10, f"a good request took {slow:.1f} s beside 300 hostile connections")
        print(f"slow-loris: {len(results) - len(bad)}/{len(results)} good requests answered "
              f"(slowest {slow:.2f} s) beside 300 hostile connections, "
              f"{h.reopened} of them closed by the server and opened again")
    finally:
        h.close()
        check(s.stop() == 0, "serve did not exit 0 after the slow-loris test")
    check(any("connections were closed for holding a slot" in line for line in s.lines),
          "no hostile connection was closed to make room")


def test_limits():
    """request_timeout_s 2: idle, dripping and half-body connections are
    cut in about 2 s, a queued request is not; max_connections_per_ip 8."""
    s = ts.Server(config=["-o", "serve.request_timeout_s=2", "-o", "serve.max_wait_ms=3000",
                          "-o", "serve.max_connections_per_ip=8"])
    try:
        lived = {}

        def hold(name, first=b"", drip=b""):
            """How long the server keeps a connection that sends first, then
            a byte of drip every 0.2 s (never inactive that long)."""
            sk = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            t0 = time.monotonic()
            try:
                sk.sendall(first)
                for i in range(60):
                    if drip:
                        sk.sendall(drip[i % len(drip):i % len(drip) + 1])
                    if closed_by_server(sk, 0.2) is not None:
                        lived[name] = time.monotonic() - t0
                        return
            except OSError:
                lived[name] = time.monotonic() - t0
            finally:
                sk.close()

        queued = {}
        threads = [threading.Thread(target=hold, args=a) for a in (
            ("idle",), ("dripping", b"", b"GET /health HTTP/1.1\r\nX-Slow: aaaa"),
            ("half-body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 100\r\n\r\n{", b" "))]
        # a request that waits 3 s in the queue (max_wait_ms) keeps its connection
        threads.append(threading.Thread(target=lambda: queued.update(r=good_request(s))))
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for name in ("idle", "dripping", "half-body"):
            w = lived.get(name)
            check(w is not None and 1.5 < w < 5,
                  f"a {name} connection lived {w} s under request_timeout_s 2")
        check(queued.get("r", (None,))[0] == 200,
              f"a request queued 3 s, past request_timeout_s 2: {queued}")
        print("request_timeout_s 2: " + ", ".join(f"{k} cut after {v:.1f} s"
                                                  for k, v in sorted(lived.items()))
              + f"; a request queued 3 s answered {queued.get('r')}")

        # 20 connections from 127.0.0.2: 8 stay, 12 are closed at once
        many = []
        for _ in range(20):
            sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sk.bind(("127.0.0.2", 0))
            sk.settimeout(5)
            sk.connect(("127.0.0.1", s.port))
            many.append(sk)
        time.sleep(1)
        cut = sum(closed_by_server(sk, 0.01) is not None for sk in many)
        check(cut == 12, f"max_connections_per_ip 8: {cut} of 20 connections refused, want 12")
        st = good_request(s)[0]
        check(st == 200, f"another address beside a full one: {st}")
        for sk in many:
            sk.close()

        # pipelined: three requests back to back on one connection, all answered
        body = json.dumps({"prompt": "x"}).encode()
        sk = socket.create_connection(("127.0.0.1", s.port), timeout=20)
        sk.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                   b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s"
                   b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" % (len(body), body))
        data, t0 = b"", time.monotonic()
        while data.count(b"HTTP/1.1 ") < 3 or not data.endswith(b"}"):
            if time.monotonic() - t0 > 10:
                break
            try:
                got = sk.recv(65536)
            except socket.timeout:
                break
            if not got:
                break
            data += got
        sk.close()
        statuses = re.findall(rb"HTTP/1.1 (\d+)", data)
        check(statuses == [b"200"] * 3, f"three pipelined requests: answers {statuses}: "
              f"{data[:300]!r}")
        check(b"Connection: close" not in data, "a pipelined answer closed the connection")
    finally:
        check(s.stop() == 0, "serve did not exit 0 after the limits test")


def test_drain_partial():
    """SIGTERM with a half-sent body and a queued request: the queued one is
    answered, the half one does not hold the server."""
    s = ts.Server(config=["-o", "serve.max_wait_ms=1000"])
    half = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pr")
    got = {}
    t = threading.Thread(target=lambda: got.update(r=good_request(s)))
    t.start()
    time.sleep(0.5)  # queued: max_wait_ms holds it for company
    t0 = time.monotonic()
    rc = s.stop(timeout=30)
    took = time.monotonic() - t0
    t.join(30)
    half.close()
    check(rc == 0, f"serve exited {rc} after SIGTERM with a half body")
    check(took < 10, f"a half-sent body held the shutdown {took:.1f} s")
    check(got.get("r", (None,))[0] == 200, f"the request in flight: {got}")
    drain = [line for line in s.lines if "accepting no more requests" in line]
    check(drain and "finishing the 1 in flight" in drain[0], f"in flight at SIGTERM: {drain}")
    print(f"SIGTERM beside a half body: exit {rc} after {took:.1f} s, the queued request "
          f"answered {got.get('r')}")


def test_hard_stop(second_signal):
    """A batch of 64 rows x 1000 tokens (tens of seconds here) is dropped
    at its next step by drain_timeout_s 1, or by a second SIGTERM."""
    s = ts.Server(config=["-o", "policy.gpu_batch_size=16", "-o", "policy.num_gpu_batches=4",
                          "-o", "serve.drain_timeout_s=" + ("0" if second_signal else "1")])
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": ["def f("] * 64, "max_tokens": 1000, "ignore_eos": True, "temperature": 1,
         "stream": True}), {"Content-Type": "application/json"})
    r = c.getresponse()
    started = False
    for _ in range(10):
        if r.status != 200 or started:
            break
        started = r.readline().startswith(b"data: ")
    check(started, f"the long batch's stream did not start: {r.status}")
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    if second_signal:
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
    rc = s.stop(sig=None, timeout=120)
    took = time.monotonic() - t0
    try:
        rest = r.read()
    except (OSError, http.client.HTTPException) as e:
        rest = repr(e).encode()
    c.close()
    what = "a second SIGTERM" if second_signal else "drain_timeout_s 1"
    check(rc == (143 if second_signal else 1), f"{what}: serve exited {rc}")
    check(took < 8, f"{what}: serve exited {took:.1f} s after SIGTERM (the batch was finished?)")
    check(any("the batch in flight abandoned" in line for line in s.lines),
          f"{what}: no batch abandoned: " + " | ".join(s.lines[-5:]))
    check(b'"finish_reason":"length"' not in rest, f"{what}: the batch ran to its end")
    print(f"hard stop by {what}: exit {rc} {took:.1f} s after SIGTERM")


def cpu_ticks(path):
    """utime + stime of a /proc stat file (a process's counts its ended
    threads too)."""
    with open(path) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def engine_thread(pid):
    """The /proc stat file of the thread named fgcore-engine, or None."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == "fgcore-engine":
                    return f"/proc/{pid}/task/{tid}/stat"
        except OSError:
            continue
    return None


def test_tokenize_off_engine():
    """Text prompts are tokenized on their connection's thread: the engine
    thread (named fgcore-engine) spends next to nothing on a prompt of 8 MB
    of text, which takes the process tenths of a second to read."""
    s = ts.Server(config=["-o", "serve.max_body_bytes=16M"])
    try:
        words = ["".join(chr(97 + (i * 7 + k * 13) % 26) for k in range(3 + i % 9))
                 for i in range(5000)]
        text = " ".join(words[i % 5000] + str(i) for i in range(800000))[:8 << 20]
        eng = engine_thread(s.proc.pid)
        if not check(eng, "serve has no thread named fgcore-engine"):
            return
        whole = f"/proc/{s.proc.pid}/stat"
        before = (cpu_ticks(whole), cpu_ticks(eng))
        st, raw = s.post({"prompt": text, "max_tokens": 1})
        total, engine = cpu_ticks(whole) - before[0], cpu_ticks(eng) - before[1]
        check(st == 400 and b"positions" in raw, f"a prompt of 8 MB: {st} {raw[:200]!r}")
        check(total >= 10, f"a prompt of 8 MB cost the server {total} ticks: too few to tell")
        check(engine * 4 < total, f"the engine thread spent {engine} of the {total} CPU ticks "
              "a prompt of 8 MB cost: it tokenized the text")
        print(f"a prompt of 8 MB of text: {total} CPU ticks, {engine} of them the engine thread's")
    finally:
        check(s.stop() == 0, "serve did not exit 0 after the tokenizing test")


def main():
    test_slow_loris()
    test_limits()
    test_tokenize_off_engine()
    test_drain_partial()
    test_hard_stop(False)
    test_hard_stop(True)
    if ts.failures:
        for srv in ts.servers:  # what the servers said, access log aside
            for line in srv.lines:
                if not re.match(r"fgcore: serve: [A-Z]+ /", line):
                    print("serve:", line)
        print(f"{len(ts.failures)} failures")
        return 1
    print("all hostile-client checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
