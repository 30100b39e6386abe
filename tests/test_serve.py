#!/usr/bin/env python3
"""tests/test_serve.py - `fgcore serve` end to end, on the trained opt-py-128x4.

Driven by the official `openai` package (completions, echo + logprobs against
Hugging Face's held-out log-probabilities, streaming, errors), by raw HTTP
(malformed requests, a 10 MB body, wrong methods, the API key), against
`run-batch` (the same bodies, sent concurrently, give the same answers), and
through SIGTERM with requests in flight.  The harnesses' requests are
tests/test_serve_harness.py's, which imports this file's Server.  Every
server is stopped on every path; every wait is bounded (a watchdog ends the
whole test)."""
import atexit
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

FG = os.path.join(os.environ["FGCORE_BUILDDIR"], "fgcore")
TD = os.environ.get("FGCORE_TESTDATA", "")
if not TD:
    print("SKIP: FGCORE_TESTDATA is not set")
    sys.exit(77)
MODEL = os.path.join(TD, "opt", "opt-py-128x4")
if not os.path.isfile(os.path.join(MODEL, "heldout.json")):
    print(f"FAIL: {MODEL}/heldout.json is missing (FGCORE_TESTDATA={TD})")
    sys.exit(1)
try:
    import openai
except ImportError:
    print("FAIL: the Python package openai is missing: run .ci/deps (or pip install openai)")
    sys.exit(1)

NAME = "opt-py-128x4"
# A batch of 4 x 2 prompts: concurrent requests share batches in varying ways.
CONFIG = ["-o", f"model.path={MODEL}", "-o", "policy.gpu_batch_size=4",
          "-o", "policy.num_gpu_batches=2", "-o", "generate.max_new_tokens=16"]
PROMPTS = ["def main(", "import os\n", "class Foo:\n    def ", "for i in range(",
           "return x +", "# compute the", "if __name__ ==", "x = [1, 2,"]

servers = []
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


class Server:
    """fgcore serve on a free port (--port 0), its stderr collected."""

    def __init__(self, *serve_args, config=()):
        self.lines = []
        self.proc = subprocess.Popen([FG, *CONFIG, *config, "serve", "--port", "0", *serve_args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        servers.append(self)
        self.port = None
        got = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^ ]*:(\d+) ", line)
                if m:
                    self.port = int(m.group(1))
                    got.set()
            got.set()
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        got.wait(120)
        if not self.port:
            raise RuntimeError("serve did not start: " + " | ".join(self.lines))
        deadline = time.monotonic() + 30
        while self.get("/health")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("serve never answered /health")
            time.sleep(0.05)

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read(), r
        finally:
            c.close()

    def get(self, path, headers=None):
        try:
            return self.request("GET", path, headers=headers)[:2]
        except OSError:
            return None, b""

    def post(self, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json", **(headers or {})}
        status, raw, _ = self.request("POST", "/v1/completions", data, h)
        return status, raw

    def log_line(self, pattern, timeout=30):
        """The first stderr line matching pattern (the access log is written
        once the answer is sent: wait for it), or None."""
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def client(self, key="none"):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=key,
                             max_retries=0, timeout=120)

    def stop(self, sig=signal.SIGTERM, timeout=120):
        # sig None: the server was signalled already and must end by itself
        # (a second signal would cut what it is still finishing)
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            fail(f"serve did not exit within {timeout} s of {sig!r}")
        self.reader.join(10)
        return rc


def stop_all():
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


atexit.register(stop_all)


def watchdog(signum, frame):
    stop_all()
    print("FAIL: the test ran past its time limit", flush=True)
    os._exit(1)


signal.signal(signal.SIGALRM, watchdog)
signal.alarm(int(os.environ.get("FGCORE_SERVE_TEST_TIMEOUT", "900")))


def error_of(raw):
    e = json.loads(raw)["error"]
    for k in ("message", "type", "param", "code"):
        check(k in e, f"error object lacks {k}: {raw!r}")
    return e


def answer_text(o):
    return [c["text"] for c in o["choices"]]


# ---- the openai client -------------------------------------------------------


def test_openai(s, heldout):
    cl = s.client()
    models = cl.models.list()
    check([m.id for m in models.data] == [NAME], f"models: {models}")

    r = cl.completions.create(model=NAME, prompt="def main(", max_tokens=12, temperature=0)
    check(len(r.choices) == 1 and r.choices[0].text, f"completion: {r}")
    check(r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 1, f"usage: {r.usage}")
    check(r.choices[0].finish_reason == "length", f"finish_reason: {r.choices[0]}")

    # echo + logprobs scores the prompt: Hugging Face's held-out log-probabilities
    ids = [heldout["input_ids"][i] for i in (0, 1)]
    r = cl.completions.create(model=NAME, prompt=ids, echo=True, logprobs=0, max_tokens=0)
    check(len(r.choices) == 2, "two prompts, two choices")
    worst = 0.0
    for i, ch in enumerate(sorted(r.choices, key=lambda c: c.index)):
        lp = ch.logprobs.token_logprobs
        check(lp[0] is None, "the first prompt token has no log-probability")
        ref = heldout["token_logprobs"][i]
        check(len(lp) == len(ref) + 1, f"{len(lp)} log-probabilities for {len(ref) + 1} tokens")
        worst = max([worst] + [abs(a - b) for a, b in zip(lp[1:], ref)])
        check(len(ch.logprobs.tokens) == len(ids[i]), "one token per prompt id")
    check(worst <= 1e-3, f"held-out log-probabilities off by {worst} (> 1e-3)")
    print(f"held-out log-probabilities via serve: worst |diff| {worst:.2e}")

    # streaming: the chunks add up to the whole greedy text, with or without a stop
    for prompt in PROMPTS[:3]:
        whole = cl.completions.create(model=NAME, prompt=prompt, max_tokens=24, temperature=0,
                                      extra_body={"ignore_eos": True}).choices[0].text
        parts = [c.choices[0].text for c in cl.completions.create(
            model=NAME, prompt=prompt, max_tokens=24, temperature=0, stream=True,
            extra_body={"ignore_eos": True})]
        check("".join(parts) == whole, f"stream {''.join(parts)!r} != {whole!r}")
        check(len(parts) > 2, f"a stream of {len(parts)} chunks")
        stop = whole[len(whole) // 2: len(whole) // 2 + 2]
        if not stop.strip():
            continue
        cut = cl.completions.create(model=NAME, prompt=prompt, max_tokens=24, temperature=0,
                                    stop=[stop, "@@never@@"]).choices[0]
        chunks = list(cl.completions.create(model=NAME, prompt=prompt, max_tokens=24,
                                            temperature=0, stop=[stop, "@@never@@"],
                                            stream=True))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        check(stop not in text and text == cut.text,
              f"stream with stop {stop!r}: {text!r}, whole answer {cut.text!r}")
        check(chunks[-1].choices[0].finish_reason == cut.finish_reason == "stop",
              f"finish_reason of a stopped stream: {chunks[-1]}")
    # echo in a stream, and its usage chunk
    chunks = list(cl.completions.create(model=NAME, prompt="x = 1", max_tokens=4, echo=True,
                                        stream=True, stream_options={"include_usage": True}))
    check(chunks[0].choices[0].text == "x = 1", f"echoed stream starts {chunks[0]}")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 4,
          f"usage chunk: {chunks[-1]}")

    # an error the client raises with the server's message
    try:
        cl.completions.create(model=NAME, prompt="x", max_tokens=2, extra_body={"bogus": 1})
        fail("an unknown field was accepted")
    except openai.BadRequestError as e:
        check("unsupported field \"bogus\"" in str(e), f"BadRequestError: {e}")
        check(e.body and e.body.get("param") == "bogus", f"param: {e.body}")
    try:
        cl.completions.create(model="gpt-17", prompt="x", max_tokens=2)
        fail("an unknown model was accepted")
    except openai.NotFoundError as e:
        check(e.body and e.body.get("code") == "model_not_found", f"NotFoundError: {e.body}")


# ---- malformed requests ------------------------------------------------------------


def test_malformed(s):
    def expect(status, code, got, what):
        st, raw = got
        if check(st == status, f"{what}: status {st}, want {status}: {raw[:200]!r}") and code:
            check(error_of(raw)["code"] == code, f"{what}: {raw[:300]!r}")
        check(s.get("/health")[0] == 200, f"server stopped serving after {what}")

    expect(400, "invalid_json", s.post(b'{"prompt": "x", '), "bad JSON")
    expect(400, "invalid_json", s.post(b'\xff\xfe'), "not UTF-8")
    expect(400, "invalid_value", s.post([1, 2]), "a body that is not an object")
    st, raw = s.post({"prompt": 5})
    expect(400, "invalid_value", (st, raw), "prompt a number")
    check(error_of(raw)["param"] == "prompt", f"param of a bad prompt: {raw!r}")
    st, raw = s.post({"prompt": "x", "max_tokens": "3"})
    check(st == 400 and error_of(raw)["param"] == "max_tokens", f"max_tokens a string: {raw!r}")
    expect(400, None, s.post({"prompt": [1, 2, 99999999], "max_tokens": 2}), "token id out of range")
    expect(400, "invalid_value", s.post({"prompt": "x", "best_of": 2, "temperature": 1,
                                         "max_tokens": 4}), "best_of > n with sampling")
    expect(404, "model_not_found", s.post({"model": "nope", "prompt": "x"}), "unknown model")
    # a 10 MB body: answered 413 from its headers; the server reads no further,
    # so the client's send may break off before it reads the answer
    big = b'{"prompt": "' + b"a" * (10 << 20) + b'"}'
    c = s.conn()
    try:
        c.putrequest("POST", "/v1/completions")
        c.putheader("Content-Length", str(len(big)))
        c.endheaders()
        try:
            c.send(big)
        except OSError:
            pass
        r = c.getresponse()
        expect(413, "request_too_large", (r.status, r.read()), "a 10 MB body")
    finally:
        c.close()

    # a 10 MB body of no declared length (chunked) is refused too
    c = s.conn()
    try:
        c.putrequest("POST", "/v1/completions")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        try:
            for _ in range(10):
                piece = b"a" * (1 << 20)
                c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            c.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server may stop reading once past its limit
        st = c.getresponse().status
        check(st == 413, f"a chunked 10 MB body: status {st}")
    except (OSError, http.client.HTTPException) as e:
        fail(f"a chunked 10 MB body: no answer ({e!r})")
    finally:
        c.close()
    check(s.get("/health")[0] == 200, "server stopped serving after a chunked body")

    expect(405, "method_not_allowed", s.request("GET", "/v1/completions")[:2], "GET completions")
    expect(405, "method_not_allowed", s.request("DELETE", "/v1/models")[:2], "DELETE models")
    expect(404, "unknown_url", s.request("POST", "/v1/chat/completions", b"{}")[:2],
           "chat completions")
    expect(404, "unknown_url", s.get("/../../etc/passwd"), "a path outside")

    # the access log gives an error answer's reason: one line, printable,
    # quotes escaped, what the body says
    def logged(pattern, what):
        check(s.log_line(pattern), f"{what}: no access-log line matches {pattern!r}: "
              + " | ".join(line for line in s.lines if " 40" in line)[-1500:])

    logged(r'^fgcore: serve: POST /v1/completions 400 .* ms reason="the request body is not valid JSON '
           r'\(line 1, column \d+\): [^"]+"$', "bad JSON")
    logged(r'^fgcore: serve: POST /v1/completions 400 .* ms reason="\\"best_of\\" \(2\) greater than '
           r'\\"n\\" \(1\) with sampling', "best_of > n with sampling")
    logged(r"^fgcore: serve: POST /v1/chat/completions 404 .* reason=\"no such endpoint: "
           r"POST /v1/chat/completions;", "chat completions")
    logged(r'^fgcore: serve: POST /v1/completions 400 .* ms reason="[^"]*9999', "token id out of range")
    st, raw = s.post({"model": "a\nb\x1b[31m" + "x" * 2000, "prompt": "x"})
    check(st == 404, f"a long model name with control characters: {st}")
    line = s.log_line(r"^fgcore: serve: POST /v1/completions 404 .* reason=\"The model 'a b\?\[31mxxx")
    check(line and line.endswith('..."') and len(line) < 400 and line.isprintable(),
          f"the reason of a long model name with control characters: {line!r}")
    # half a request, then the client goes away
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sk:
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
    check(s.get("/health")[0] == 200, "server stopped serving after a half request")
    # a stream whose client leaves at the first chunk
    c = s.conn()
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": "def f(", "max_tokens": 200, "stream": True, "ignore_eos": True}),
        {"Content-Type": "application/json"})
    r = c.getresponse()
    r.fp.readline()
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    st, raw = s.post({"prompt": "def f(", "max_tokens": 4})
    check(st == 200, f"a request after a client left mid-stream: {st} {raw[:200]!r}")


def test_api_key():
    s = Server("--api-key", "s3cret")
    try:
        check(s.get("/health")[0] == 200, "/health needs no key")
        st, raw = s.post({"prompt": "x", "max_tokens": 1})
        check(st == 401 and error_of(raw)["code"] == "invalid_api_key", f"no key: {st} {raw!r}")
        st, _ = s.post({"prompt": "x", "max_tokens": 1}, {"Authorization": "Bearer s3cre"})
        check(st == 401, f"a wrong key: {st}")
        check(s.get("/v1/models")[0] == 401, "models without the key")
        check(s.get("/tokenizer_info")[0] == 401, "/tokenizer_info without the key")
        st, _, _ = s.request("POST", "/tokenize", b'{"prompt": "x"}')
        check(st == 401, f"/tokenize without the key: {st}")
        key = {"Authorization": "Bearer s3cret"}
        check(s.get("/tokenizer_info", key)[0] == 200, "/tokenizer_info with the key")
        st, _, _ = s.request("POST", "/detokenize", b'{"tokens": [1]}', key)
        check(st == 200, f"/detokenize with the key: {st}")
        try:
            s.client("wrong").completions.create(model=NAME, prompt="x", max_tokens=1)
            fail("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        r = s.client("s3cret").completions.create(model=NAME, prompt="x", max_tokens=2)
        check(r.usage.completion_tokens <= 2, "the right key")
    finally:
        check(s.stop() == 0, "serve with a key did not exit 0")


def test_overload():
    """queue_limit 2 and a long max_wait_ms: two requests of two prompts each
    cannot both wait; whichever comes second is answered 503."""
    s = Server(config=["-o", "serve.queue_limit=2", "-o", "serve.max_wait_ms=2000"])
    try:
        with ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda _: s.post({"prompt": ["a", "b"], "max_tokens": 2}), range(2)))
        statuses = sorted(st for st, _ in got)
        check(statuses == [200, 503], f"two requests past queue_limit: {statuses}")
        for st, raw in got:
            if st == 503:
                check(error_of(raw)["code"] == "overloaded", f"503 body: {raw!r}")
        check(s.post({"prompt": "a", "max_tokens": 1})[0] == 200, "serving after an overload")
    finally:
        check(s.stop() == 0, "serve after an overload did not exit 0")


# ---- the same as run-batch -----------------------------------------------------------


def bodies():
    out = []
    for i, p in enumerate(PROMPTS):
        out.append({"model": NAME, "prompt": p, "max_tokens": 8 + 3 * i, "temperature": 0,
                    "ignore_eos": i % 2 == 0})
    out.append({"prompt": PROMPTS[:3], "max_tokens": 6, "echo": True, "logprobs": 2})
    out.append({"prompt": [[8191, 100, 200, 300], [8191, 5, 6]], "max_tokens": 5,
                "logprobs": 3})
    out.append({"prompt": "def main(", "max_tokens": 20, "stop": ["\n", ")"]})
    out.append({"prompt": "import", "max_tokens": 10, "temperature": 0.8, "seed": 7,
                "top_p": 0.9})
    return out


def comparable(o):
    return [(c["index"], c["text"], c["finish_reason"], c["logprobs"]) for c in o["choices"]], o["usage"]


def close(a, b, what):
    if isinstance(a, float) or isinstance(b, float):
        return check(isinstance(a, (int, float)) and isinstance(b, (int, float)) and
                     abs(a - b) <= 1e-5, f"{what}: {a} vs {b}")
    if isinstance(a, dict):
        return check(isinstance(b, dict) and a.keys() == b.keys(), f"{what}: keys") and \
            all(close(a[k], b[k], f"{what}.{k}") for k in a)
    if isinstance(a, (list, tuple)):
        return check(isinstance(b, (list, tuple)) and len(a) == len(b), f"{what}: lengths") and \
            all(close(x, y, f"{what}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    return check(a == b, f"{what}: {a!r} vs {b!r}")


def test_run_batch(s, tmp):
    bs = bodies()
    inp = os.path.join(tmp, "in.jsonl")
    out = os.path.join(tmp, "out.jsonl")
    with open(inp, "w") as f:
        for i, b in enumerate(bs):
            f.write(json.dumps({"custom_id": str(i), "method": "POST", "url": "/v1/completions",
                                "body": b}) + "\n")
    rb = subprocess.run([FG, *CONFIG, "run-batch", "--input", inp, "--output", out],
                        capture_output=True, text=True, timeout=300)
    check(rb.returncode == 0, f"run-batch: {rb.stderr}")
    ref = {}
    with open(out) as f:
        for line in f:
            rec = json.loads(line)
            ref[rec["custom_id"]] = rec["response"]["body"]
    # all at once, three times over: each time batched differently
    with ThreadPoolExecutor(len(bs) * 3) as ex:
        got = list(ex.map(lambda b: s.post(b), bs * 3))
    for k, (st, raw) in enumerate(got):
        i = k % len(bs)
        if check(st == 200, f"body {i}: {st} {raw[:200]!r}"):
            close(comparable(json.loads(raw)), comparable(ref[str(i)]), f"body {i} vs run-batch")


# ---- SIGTERM with requests in flight ---------------------------------------------------------


def test_sigterm():
    s = Server(config=["-o", "serve.max_wait_ms=1000"])
    results = {}

    def stream(i, started):
        try:
            c = s.conn()
            c.request("POST", "/v1/completions", json.dumps(
                {"prompt": PROMPTS[i], "max_tokens": 120, "stream": True, "ignore_eos": True}),
                {"Content-Type": "application/json"})
            r = c.getresponse()
            text, done, first = "", False, True
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                if first:
                    started.set()
                    first = False
                if line == "data: [DONE]":
                    done = True
                    break
                text += json.loads(line[6:])["choices"][0]["text"]
            results[("stream", i)] = (r.status, done, text)
        except Exception as e:
            results[("stream", i)] = (None, False, repr(e))
            started.set()

    def whole(i):
        try:
            st, raw = s.post({"prompt": PROMPTS[i], "max_tokens": 120, "ignore_eos": True})
            results[("whole", i)] = (st, json.loads(raw))
        except Exception as e:
            results[("whole", i)] = (None, repr(e))

    # All six share one batch (max_wait_ms 1000 gathers them): when the
    # streams have begun, the two whole requests are running too.
    threads = [threading.Thread(target=whole, args=(i,)) for i in (4, 5)]
    for t in threads:
        t.start()
    events = []
    for i in range(4):
        ev = threading.Event()
        events.append(ev)
        threads.append(threading.Thread(target=stream, args=(i, ev)))
        threads[-1].start()
    for ev in events:
        ev.wait(120)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        st = s.post({"prompt": "x", "max_tokens": 1})[0]
        check(st == 503, f"a request after SIGTERM: status {st}")
    except OSError:
        pass  # refused: the listening socket is closed
    for t in threads:
        t.join(300)
    rc = s.stop(sig=None, timeout=300)
    check(rc == 0, f"serve exited {rc} after SIGTERM, not 0")
    for key, v in sorted(results.items()):
        if key[0] == "stream":
            check(v[0] == 200 and v[1] and v[2], f"in-flight stream {key[1]}: {v}")
        else:
            check(v[0] == 200 and v[1]["usage"]["completion_tokens"] == 120,
                  f"in-flight request {key[1]}: {str(v)[:300]}")
    check(len(results) == 6, f"{len(results)} of 6 in-flight requests answered")
    drain = [line for line in s.lines if "SIGTERM: accepting no more requests" in line]
    m = re.search(r"finishing the (\d+) in flight", drain[0] if drain else "")
    check(m and int(m.group(1)) >= 4, f"shutdown message: {drain}")
    log = [line for line in s.lines if "POST /v1/completions 200" in line]
    check(len(log) >= 6, f"access log: {log}")
    print("SIGTERM:", " | ".join(line for line in s.lines if "POST" not in line))


def main():
    with open(os.path.join(MODEL, "heldout.json")) as f:
        heldout = json.load(f)
    tmp = tempfile.mkdtemp(prefix="fgcore-serve-")
    s = Server()
    try:
        for t in (lambda: test_openai(s, heldout), lambda: test_malformed(s),
                  lambda: test_run_batch(s, tmp)):
            t()
    finally:
        rc = s.stop()
    check(rc == 0, f"serve exited {rc} on SIGTERM")
    log = [line for line in s.lines if re.match(r"fgcore: serve: \S+ \S+ \d{3} prompt_tokens=\d+ completion_tokens=\d+ [\d.]+ ms", line)]
    check(len(log) > 20, f"{len(log)} access-log lines")
    print(f"{len(log)} access-log lines, e.g. {log[-3]!r}")
    test_api_key()
    test_overload()
    test_sigterm()
    subprocess.run(["rm", "-rf", tmp])
    if failures:
        for srv in servers:  # what the servers said, access log aside (sanitizer reports too)
            for line in srv.lines:
                if not re.match(r"fgcore: serve: [A-Z]+ /", line):
                    print("serve:", line)
        print(f"{len(failures)} failures")
        return 1
    print("all serve checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
