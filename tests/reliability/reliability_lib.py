"""Shared pieces of the reliability probes (probes_test.py) and bench/reliability: finding the
model, starting `inferd serve` (through tests/e2e/server_harness.py) with its stderr drained,
raw-socket HTTP, the server's RSS and metrics, and the random-disconnect storm.

Everything talks to loopback only, and every socket has a timeout."""
import http.client
import json
import math
import os
import random
import re
import select
import selectors
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

from server_harness import Server  # noqa: E402

LOOPBACK = "127.0.0.1"
# The metrics that must all read 0 once every request has finished or been cancelled.
IDLE_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc", "inferd:kv_blocks_used")


# ---------------------------------------------------------------------------------------------
# Model and server


def find_model(explicit=None):
    """--model, else $INFERD_MODEL, else what scripts/fetch-model prints; None when none is
    there (the caller skips)."""
    for path in (explicit, os.environ.get("INFERD_MODEL")):
        if path:
            return path if os.path.exists(path) else None
    try:
        out = subprocess.run([os.path.join(ROOT, "scripts", "fetch-model")], cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    return path if path and os.path.exists(path) else None


def flag_value(flags, name, default):
    """The number after `name` in a flag list (or `name=value`), else default."""
    for i, flag in enumerate(flags):
        if flag == name and i + 1 < len(flags):
            return float(flags[i + 1])
        if flag.startswith(name + "="):
            return float(flag.split("=", 1)[1])
    return default


class ManagedServer(Server):
    """harness.Server whose stderr is read all along by a thread (so a chatty server never
    blocks on a full pipe), keeping its last lines for a failure's message."""

    def __init__(self, inferd, model, *extra):
        super().__init__(inferd, model, *extra)
        self.pid = self.proc.pid
        self.flags = list(extra)
        self.log = deque(self.log, maxlen=400)
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self):
        try:
            for line in self.proc.stderr:
                self.log.append(line)
        except (OSError, ValueError):
            pass

    def alive(self):
        return self.proc.poll() is None

    def tail(self, n=15):
        return "".join(list(self.log)[-n:])

    def stop(self):
        self.end_process()
        self._drain.join(timeout=5)
        return self.proc.returncode


def start_server(inferd, model, flags):
    """A ManagedServer, or SystemExit with the server's own words when it will not start (a
    flag the binary does not know yet, say)."""
    try:
        return ManagedServer(inferd, model, *flags)
    except RuntimeError as e:
        sys.exit(f"FAIL: `{inferd} serve -m {model} --port 0 {' '.join(flags)}` did not start "
                 f"(adjust the flag list if the binary lacks one):\n{e}")


def rss_kb(pid):
    """The process's resident set (VmRSS) in KiB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler:
    """Samples a process's RSS every `interval` seconds on a thread; .peak and .samples."""

    def __init__(self, pid, interval=0.01):
        self.pid, self.interval = pid, interval
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            kb = rss_kb(self.pid)
            if kb is not None:
                self.samples.append((time.monotonic(), kb))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def peak(self):
        return max((kb for _, kb in self.samples), default=0)


def metrics_values(base, timeout=10):
    """GET /metrics as {name without labels: value} (the harness's parsing)."""
    text = urllib.request.urlopen(base + "/metrics", timeout=timeout).read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        name = re.sub(r"\{.*\}", "", name) if "bucket" not in name else name
        try:
            values[name] = float(value)
        except ValueError:
            pass
    return values


def wait_idle(base, within):
    """Polls /metrics until every IDLE_METRICS gauge is 0. (True, seconds, values) or
    (False, within, last values)."""
    t0 = time.monotonic()
    values = {}
    while True:
        try:
            values = metrics_values(base)
            if all(values.get(name, 0.0) == 0.0 for name in IDLE_METRICS):
                return True, time.monotonic() - t0, values
        except (OSError, urllib.error.URLError, http.client.HTTPException):
            pass
        if time.monotonic() - t0 > within:
            return False, within, values
        time.sleep(0.1)


def idle_summary(values):
    return ", ".join(f"{name.split(':')[1]}={values.get(name, float('nan')):g}"
                     for name in IDLE_METRICS)


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


# ---------------------------------------------------------------------------------------------
# Plain requests (http.client)


def request(port, method, path, body=None, headers=None, timeout=30, host=LOOPBACK):
    """(status, body bytes, seconds); status None and the error text as body on a timeout or a
    dropped connection."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, data, time.monotonic() - t0
    except (OSError, http.client.HTTPException) as e:
        return None, f"{type(e).__name__}: {e}".encode(), time.monotonic() - t0
    finally:
        conn.close()


def health(port, timeout=10):
    status, _, seconds = request(port, "GET", "/health", timeout=timeout)
    return status, seconds


def error_message(body):
    """The error object's message and param of a JSON error answer ('' when there is none)."""
    try:
        doc = json.loads(body)
    except (ValueError, TypeError):
        return str(body[:200]), ""
    err = doc.get("error", doc) if isinstance(doc, dict) else {}
    if not isinstance(err, dict):
        return str(err), ""
    return str(err.get("message", "")), str(err.get("param") or "")


# ---------------------------------------------------------------------------------------------
# Raw-socket HTTP


def connect(port, source=None, timeout=5.0, host=LOOPBACK):
    """A connected TCP socket (bound to `source` first when given) with a timeout."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if source:
            try:  # the port is picked at connect, per destination: more sockets per address
                s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24), 1)
            except OSError:
                pass
            s.bind((source, 0))
        s.settimeout(timeout)
        s.connect((host, port))
    except OSError:
        s.close()
        raise
    return s


def abort(sock):
    """Closes with a reset (SO_LINGER 0) rather than a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    sock.close()


def status_of(head):
    m = re.match(rb"HTTP/\d\.\d (\d{3})", head)
    return int(m.group(1)) if m else None


class Reader:
    """Reads HTTP responses off a socket, keeping what follows one for the next."""

    def __init__(self, sock):
        self.sock, self.buf, self.eof, self.error = sock, b"", False, None

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline passed")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise
        except OSError as e:  # a reset: what arrived before it is kept
            self.error, self.eof = e, True
            return False
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def head(self, deadline):
        """(status, {lower-case name: value}, head bytes) of the next response head; status
        None when the connection ended first. socket.timeout at the deadline."""
        while b"\r\n\r\n" not in self.buf:
            if self.eof or not self._fill(deadline):
                return None, {}, self.buf
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        return status_of(head), headers, head

    def status_line(self, deadline):
        """Only the next status line: (status or None)."""
        while b"\r\n" not in self.buf:
            if self.eof or not self._fill(deadline):
                return status_of(self.buf)
        return status_of(self.buf)

    def _line(self, deadline):
        while b"\r\n" not in self.buf:
            if self.eof or not self._fill(deadline):
                return None
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n, deadline):
        while len(self.buf) < n and not self.eof and self._fill(deadline):
            pass
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def body(self, headers, deadline):
        """The body after a head: by Content-Length, chunked, or to the end."""
        if "content-length" in headers:
            return self._take(int(headers["content-length"]), deadline)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            out = b""
            while True:
                line = self._line(deadline)
                if line is None:
                    return out
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers, up to the empty line
                        line = self._line(deadline)
                        if not line:
                            return out
                out += self._take(size, deadline)
                self._take(2, deadline)
        while not self.eof and self._fill(deadline):
            pass
        data, self.buf = self.buf, b""
        return data

    def response(self, deadline, skip_interim=True):
        """(status, headers, body) of the next final response (1xx skipped if asked)."""
        while True:
            status, headers, _ = self.head(deadline)
            if status is None:
                return None, headers, b""
            if skip_interim and 100 <= status < 200:
                continue
            return status, headers, self.body(headers, deadline)


def exchange(port, head, pieces=(), within=5.0, source=None, stop_on_response=True):
    """Sends `head` then the byte strings `pieces` yields, watching the socket for an answer all
    along; sending stops at the first byte of an answer or a send error (EPIPE/ECONNRESET).
    Then reads the first status line. Returns a dict: status (None if none), seconds (from the
    start to the status line), sent (body bytes sent), send_error, closed (EOF or reset seen)."""
    t0 = time.monotonic()
    deadline = t0 + within
    out = {"status": None, "seconds": None, "sent": 0, "send_error": None, "closed": False}
    try:
        s = connect(port, source=source, timeout=min(within, 5.0))
    except OSError as e:
        out["send_error"] = f"connect: {e}"
        return out
    reader = Reader(s)
    pending = memoryview(head)
    it = iter(pieces)
    sending = True
    counted_head = len(head)
    try:
        s.setblocking(False)
        while time.monotonic() < deadline:
            if sending and not pending:
                nxt = next(it, None)
                if nxt is None:
                    sending = False
                else:
                    pending = memoryview(nxt)
            wlist = [s] if sending and pending else []
            r, w, _ = select.select([s], wlist, [], max(0.0, min(0.05, deadline - time.monotonic())))
            if r:
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    data = None
                except OSError as e:
                    out["closed"] = True
                    reader.error = e
                    break
                if data == b"":
                    out["closed"] = True
                    break
                if data:
                    reader.buf += data
                    if stop_on_response:
                        sending = False
                    if b"\r\n" in reader.buf:
                        break
            if w:
                try:
                    n = s.send(pending)
                except BlockingIOError:
                    n = 0
                except OSError as e:  # EPIPE / ECONNRESET: the server has stopped reading
                    out["send_error"] = f"{type(e).__name__}: {e}"
                    sending = False
                    n = 0
                if n:
                    if counted_head > 0:
                        used = min(n, counted_head)
                        counted_head -= used
                        out["sent"] += n - used
                    else:
                        out["sent"] += n
                    pending = pending[n:]
        # The status line, if not all here yet.
        s.setblocking(True)
        if b"\r\n" not in reader.buf and not out["closed"]:
            try:
                reader.status_line(deadline)
            except socket.timeout:
                pass
            out["closed"] = out["closed"] or reader.eof
        out["status"] = status_of(reader.buf)
        if out["status"] is not None:
            out["seconds"] = time.monotonic() - t0
        out["head"] = reader.buf[:200]
    finally:
        s.close()
    return out


def watch_closed(socks, until, on_tick=None, tick=0.05):
    """Waits until the server has closed each socket (EOF or reset, after any response bytes
    such as a 408) or `until` (a monotonic time) passes. {socket: close time}, and the bytes
    each one received. on_tick(now, closed) is called every `tick` seconds (e.g. to trickle
    bytes)."""
    sel = selectors.DefaultSelector()
    closed, got = {}, {}
    for s in socks:
        try:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        except (OSError, ValueError):
            closed[s] = time.monotonic()
    try:
        while len(closed) < len(socks):
            now = time.monotonic()
            if now >= until:
                break
            if on_tick:
                on_tick(now, closed)
            for key, _ in sel.select(timeout=min(tick, until - now)):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    got[s] = got.get(s, b"") + data[:512]
                    continue
                closed[s] = time.monotonic()
                sel.unregister(s)
    finally:
        sel.close()
    return closed, got


# ---------------------------------------------------------------------------------------------
# Random disconnects

DISCONNECT_MODES = ("before-headers", "mid-body", "after-request", "mid-response",
                    "after-request-stream", "mid-stream")

PROMPTS = ["Once upon a time in a quiet village,", "The history of the printing press",
           "Write a short poem about the sea.", "List three facts about Paris:",
           "In the beginning there was", "The best way to learn a language is"]


def completion_request(port, stream, max_tokens=64, rng=None):
    rng = rng or random
    body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": max_tokens,
                       "temperature": 0.8, "ignore_eos": True, "stream": stream}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def vanish(port, rng, mode, max_tokens=64, source=None):
    """One client that goes away at a random moment of its request. The mode it used."""
    stream = mode in ("after-request-stream", "mid-stream") or (
        mode in ("before-headers", "mid-body") and rng.random() < 0.5)
    head, body = completion_request(port, stream, max_tokens, rng)
    try:
        s = connect(port, source=source, timeout=10)
    except OSError:
        return mode + ":connect-failed"
    try:
        if mode == "before-headers":
            s.sendall(head[:rng.randrange(1, len(head) - 1)])
        elif mode == "mid-body":
            s.sendall(head + body[:rng.randrange(0, len(body) - 1)])
        else:
            s.sendall(head + body)
            if mode.startswith("after-request"):
                time.sleep(rng.random() * 0.3)
            else:  # read a little of the answer (whole: its first bytes; stream: a few events)
                s.settimeout(15)
                want = rng.randrange(1, 600)
                got = 0
                while got < want:
                    data = s.recv(want - got)
                    if not data:
                        break
                    got += len(data)
        time.sleep(rng.random() * 0.05)
    except OSError:
        pass
    finally:
        if rng.random() < 0.5:
            abort(s)
        else:
            s.close()
    return mode


def disconnect_storm(port, count, seed=1, workers=16, max_tokens=64, sources=None,
                     budget_s=None):
    """`count` vanishing clients, `workers` at a time, modes drawn at random. {mode: count}
    ('skipped' counts the ones not started once `budget_s` seconds have passed)."""
    import concurrent.futures
    rng = random.Random(seed)
    plan = [(random.Random(rng.random()), rng.choice(DISCONNECT_MODES),
             rng.choice(sources) if sources else None) for _ in range(count)]
    t0 = time.monotonic()

    def one(p):
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            return "skipped"
        return vanish(port, p[0], p[1], max_tokens, p[2])

    done = {}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for mode in pool.map(one, plan):
            done[mode] = done.get(mode, 0) + 1
    return done


def metric_sum(base, name, **labels):
    """The sum of a metric's samples whose labels include `labels` (0 when there are none)."""
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total
