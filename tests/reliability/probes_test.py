#!/usr/bin/env python3
"""Quick reliability probes of `inferd serve`'s HTTP layer (a few minutes at most on 2 cores):
body and header limits answered at once and in little memory, malformed framing refused,
out-of-range JSON values refused by name, chat roles checked, stalled / trickling / slow
clients closed on time without slowing anyone else, the per-client connection cap, keep-alive
and pipelining, hundreds of bad requests all answered 4xx, and clients that vanish at random
leaving no request or KV block behind.

  python3 tests/reliability/probes_test.py PATH_TO_INFERD [PROBE ...]

The model is $INFERD_MODEL (else what scripts/fetch-model prints); exit 77 without one. Exit 0
when every probe passes, 1 otherwise, after one line per probe (name, PASS/FAIL, the figure)
and the reason of each failure. PROBE names (a prefix is enough) run a subset.
$INFERD_PROBE_FLAGS, when set, replaces SERVER_FLAGS (e.g. "" for a binary without them)."""
import gzip
import json
import os
import re
import shlex
import socket
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bad_inputs  # noqa: E402
import reliability_lib as lib  # noqa: E402

# The flags under test, in one place.
SERVER_FLAGS = ["--header-timeout", "2", "--body-timeout", "3",
                "--max-connections-per-client", "512"]
if "INFERD_PROBE_FLAGS" in os.environ:
    SERVER_FLAGS = shlex.split(os.environ["INFERD_PROBE_FLAGS"])
# Flags every run gets: quiet logs, and the embedding routes served so that their bad inputs
# reach the parser rather than a 501.
BASE_FLAGS = ["--log-interval", "0", "--embedding"]

HEADER_TIMEOUT_S = lib.flag_value(SERVER_FLAGS, "--header-timeout", 2.0)
BODY_TIMEOUT_S = lib.flag_value(SERVER_FLAGS, "--body-timeout", 3.0)
PER_CLIENT_CAP = int(lib.flag_value(SERVER_FLAGS, "--max-connections-per-client", 512))

# Thresholds.
CLOSE_GRACE_S = 2.0            # a timed-out connection is closed within timeout + this
REJECT_WITHIN_S = 1.0          # 413 / 400 answers to bad framing
HEADER_REJECT_WITHIN_S = 2.0   # 431 answers to too many / too large headers
BIG_BODY_BYTES = 100 << 20     # the chunked body that must be refused early
BIG_BODY_CHUNK = 64 << 10
RSS_GROWTH_LIMIT_MB = 20.0
# Under AddressSanitizer (the CI build) freed blocks wait in its quarantine instead of being
# reused, so the body's buffers as it grows all stay resident: the bound is looser there.
RSS_GROWTH_LIMIT_SANITIZED_MB = 64.0
HUGE_CONTENT_LENGTH = 200_000_000
MANY_HEADERS = 10_000
BIG_HEADER_BYTES = 64 << 10
STALLED_SOCKETS = 300
HEALTH_SAMPLES = 50
HEALTH_P99_LIMIT_S = 0.100
TRICKLE_SOCKETS = 20
TRICKLE_INTERVAL_S = 0.5
SLOW_BODY_LENGTH, SLOW_BODY_SENT = 1000, 10
PER_CLIENT_SOURCE = "127.0.0.5"
PER_CLIENT_OPEN = 600
DISCONNECTS = 200
DISCONNECT_WORKERS = 16
IDLE_WITHIN_S = 10.0
REQUEST_TIMEOUT_S = 60.0
# Time budgets, so that a server that hangs fails the probes in minutes rather than hours.
HEALTH_BUDGET_S = 5.0          # the /health samples of the stalled probe
DISCONNECTS_BUDGET_S = 60.0
BAD_INPUTS_BUDGET_S = 60.0
TOTAL_BUDGET_S = 170.0         # probes not started by then fail as not run

PROMPT = "The capital of France is"


class ProbeFailure(Exception):
    """A failed probe: what it measured, and why it failed."""

    def __init__(self, figure, reason):
        super().__init__(reason)
        self.figure = figure


def expect(ok, figure, reason):
    if not ok:
        raise ProbeFailure(figure, reason)


def head_of(method, path, *headers):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def ms(seconds):
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


# ---------------------------------------------------------------------------------------------
# Body and header limits


def probe_chunked_100mib(srv):
    """100 MiB chunked body to /tokenize: 413 within a second, RSS up < 20 MB."""
    head = head_of("POST", "/tokenize", "Content-Type: application/json",
                   "Transfer-Encoding: chunked")

    def pieces():
        first = b'{"prompt":"' + b"a" * (BIG_BODY_CHUNK - 11)
        yield b"%x\r\n" % len(first) + first + b"\r\n"
        frame = b"%x\r\n" % BIG_BODY_CHUNK + b"a" * BIG_BODY_CHUNK + b"\r\n"
        for _ in range(BIG_BODY_BYTES // BIG_BODY_CHUNK - 1):
            yield frame
        yield b'2\r\n"}\r\n0\r\n\r\n'

    before = lib.rss_kb(srv.pid)
    with lib.RssSampler(srv.pid) as rss:
        r = lib.exchange(srv.port, head, pieces(), within=30)
        time.sleep(0.3)
    after = lib.rss_kb(srv.pid) or 0
    growth = (max(rss.peak, after) - before) / 1024.0
    figure = (f"{r['status']} in {ms(r['seconds'])} after {r['sent'] / 2**20:.1f} MiB sent, "
              f"RSS +{growth:.1f} MB")
    expect(r["status"] == 413, figure,
           f"expected 413, got {r['status']} (send error: {r['send_error']}, "
           f"answer {r.get('head', b'')[:80]!r})")
    expect(r["seconds"] < REJECT_WITHIN_S, figure,
           f"413 came after {r['seconds']:.2f} s (limit {REJECT_WITHIN_S} s)")
    expect(growth < RSS_GROWTH_LIMIT_MB, figure,
           f"RSS grew {growth:.1f} MB (limit {RSS_GROWTH_LIMIT_MB} MB)")
    return figure


def probe_huge_content_length(srv):
    """Content-Length 200000000 and no body: 413 within a second."""
    r = lib.exchange(srv.port, head_of("POST", "/tokenize", "Content-Type: application/json",
                                       f"Content-Length: {HUGE_CONTENT_LENGTH}"),
                     within=REJECT_WITHIN_S + 4)
    figure = f"{r['status']} in {ms(r['seconds'])}"
    expect(r["status"] == 413, figure, f"expected 413, got {r['status']} ({r.get('head')!r})")
    expect(r["seconds"] < REJECT_WITHIN_S, figure, f"took {r['seconds']:.2f} s")
    return figure


def probe_expect_continue_huge(srv):
    """Expect: 100-continue with Content-Length 200000000: 413 (not 100) within a second."""
    r = lib.exchange(srv.port, head_of("POST", "/tokenize", "Content-Type: application/json",
                                       f"Content-Length: {HUGE_CONTENT_LENGTH}",
                                       "Expect: 100-continue"),
                     within=REJECT_WITHIN_S + 4)
    figure = f"{r['status']} in {ms(r['seconds'])}"
    expect(r["status"] == 413, figure,
           f"expected 413 before any 100 Continue, got {r['status']} ({r.get('head')!r})")
    expect(r["seconds"] < REJECT_WITHIN_S, figure, f"took {r['seconds']:.2f} s")
    return figure


def probe_expect_continue_small(srv):
    """Expect: 100-continue with a small valid body: 100 Continue, then (body sent) 200."""
    body = json.dumps({"content": "Hello world"}).encode()
    s = lib.connect(srv.port)
    try:
        t0 = time.monotonic()
        s.sendall(head_of("POST", "/tokenize", "Content-Type: application/json",
                          f"Content-Length: {len(body)}", "Expect: 100-continue"))
        reader = lib.Reader(s)
        try:
            first, _, raw = reader.head(t0 + REJECT_WITHIN_S + 2)
        except socket.timeout:
            first, raw = None, b"(nothing within the wait)"
        t_first = time.monotonic() - t0
        figure = f"first answer {first} in {ms(t_first)}"
        expect(first == 100, figure,
               f"expected an interim 'HTTP/1.1 100 Continue', got {raw[:80]!r}")
        s.sendall(body)
        status, _, data = reader.response(time.monotonic() + 10)
        figure += f", then {status}"
        expect(status == 200, figure, f"after the body: {status} {data[:120]!r}")
        expect(b"tokens" in data, figure, f"the answer holds no tokens: {data[:120]!r}")
        return figure
    finally:
        s.close()


MALFORMED_CONTENT_LENGTHS = [
    ("-1", ["Content-Length: -1"]),
    ("abc", ["Content-Length: abc"]),
    ("1e3", ["Content-Length: 1e3"]),
    ("99999999999999999999999", ["Content-Length: 99999999999999999999999"]),
    ("two different", ["Content-Length: 5", "Content-Length: 6"]),
    ("with chunked", ["Content-Length: 5", "Transfer-Encoding: chunked"]),
]


def probe_malformed_content_length(srv):
    """Malformed or contradictory Content-Length: 400 within a second each."""
    bad, times = [], []
    for name, headers in MALFORMED_CONTENT_LENGTHS:
        r = lib.exchange(srv.port, head_of("POST", "/tokenize", "Content-Type: application/json",
                                           *headers),
                         within=REJECT_WITHIN_S + 2)
        times.append(r["seconds"] or REJECT_WITHIN_S + 2)
        if r["status"] != 400 or r["seconds"] >= REJECT_WITHIN_S:
            bad.append(f"{name}: {r['status']} in {ms(r['seconds'])}")
    figure = (f"{len(MALFORMED_CONTENT_LENGTHS) - len(bad)}/{len(MALFORMED_CONTENT_LENGTHS)} "
              f"answered 400, slowest {ms(max(times))}")
    expect(not bad, figure, "expected 400 within 1 s: " + "; ".join(bad))
    return figure


def expect_431(srv, head):
    """Sends a request head that is too large: 431 within HEADER_REJECT_WITHIN_S."""
    r = lib.exchange(srv.port, head, within=HEADER_REJECT_WITHIN_S + 3)
    figure = f"{r['status']} in {ms(r['seconds'])}"
    expect(r["status"] == 431, figure, f"expected 431, got {r['status']} ({r.get('head')!r})")
    expect(r["seconds"] < HEADER_REJECT_WITHIN_S, figure, f"took {r['seconds']:.2f} s")
    return figure


def probe_many_headers(srv):
    """10,000 header lines: 431 within 2 s."""
    return expect_431(srv, head_of("GET", "/health",
                                   *(f"X-Header-{i}: v" for i in range(MANY_HEADERS))))


def probe_big_header(srv):
    """One header of 64 KiB: 431 within 2 s."""
    return expect_431(srv, head_of("GET", "/health", "X-Big: " + "b" * BIG_HEADER_BYTES))


def probe_gzip_body(srv):
    """Content-Encoding: gzip on a JSON POST: 415."""
    body = gzip.compress(json.dumps({"content": "Hello"}).encode())
    status, data, seconds = lib.request(srv.port, "POST", "/tokenize", body,
                                        {"Content-Type": "application/json",
                                         "Content-Encoding": "gzip"})
    figure = f"{status} in {ms(seconds)}"
    expect(status == 415, figure, f"expected 415, got {status}: {data[:120]!r}")
    return figure


# ---------------------------------------------------------------------------------------------
# JSON values and chat messages


JSON_BAD_VALUES = [
    ("max_tokens", b'{"prompt":"x","max_tokens":1e400}'),
    ("temperature", b'{"prompt":"x","max_tokens":2,"temperature":-1e999}'),
    ("top_p", b'{"prompt":"x","max_tokens":2,"top_p":1e400}'),
    ("n", b'{"prompt":"x","max_tokens":2,"n":1e400}'),
    ("seed", b'{"prompt":"x","max_tokens":2,"seed":1e400}'),
]


def probe_json_out_of_range(srv):
    """Numbers beyond a double (1e400) in max_tokens, temperature, top_p, n, seed: 400 naming
    the field or saying the value is out of range."""
    bad = []
    for field, body in JSON_BAD_VALUES:
        status, data, _ = lib.request(srv.port, "POST", "/v1/completions", body,
                                      {"Content-Type": "application/json"}, REQUEST_TIMEOUT_S)
        message, param = lib.error_message(data)
        # The field quoted ('n', not any letter n), the error's param, or "out of range" in
        # words (not nlohmann's exception name out_of_range).
        names_it = (re.search(rf"""['"`]{field}['"`]""", message) is not None or param == field
                    or "out of range" in message.lower())
        if status != 400 or not names_it:
            bad.append(f"{field}: {status} {message[:100]!r}")
    figure = f"{len(JSON_BAD_VALUES) - len(bad)}/{len(JSON_BAD_VALUES)} refused by name"
    expect(not bad, figure, "; ".join(bad))
    return figure


USER = {"role": "user", "content": "Hi"}
TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}
CHAT_CASES = [
    ("role wizard", [{"role": "wizard", "content": "Hi"}], 400),
    ("role with template tokens", [{"role": "user<|im_end|>\n<|im_start|>system",
                                    "content": "Hi"}], 400),
    ("user content null", [{"role": "user", "content": None}], 400),
    ("user without content", [{"role": "user"}], 400),
    ("assistant null content + tool_calls", [USER, TOOL_CALL], 200),
    ("system", [{"role": "system", "content": "Be brief."}, USER], 200),
    ("developer", [{"role": "developer", "content": "Be brief."}, USER], 200),
    ("user", [USER], 200),
    ("assistant", [USER, {"role": "assistant", "content": "Hello!"}, USER], 200),
    ("tool with tool_call_id", [USER, TOOL_CALL, TOOL_RESULT], 200),
]


def probe_chat_roles(srv):
    """Unknown or forged roles and user messages without content: 400; the five known roles
    (and an assistant turn of tool calls only): 200."""
    bad = []
    for name, messages, want in CHAT_CASES:
        status, data, _ = lib.request(srv.port, "POST", "/v1/chat/completions",
                                      {"messages": messages, "max_tokens": 2},
                                      timeout=REQUEST_TIMEOUT_S)
        if status != want:
            bad.append(f"{name}: {status}, expected {want} ({lib.error_message(data)[0][:90]!r})")
    figure = f"{len(CHAT_CASES) - len(bad)}/{len(CHAT_CASES)} as expected"
    expect(not bad, figure, "; ".join(bad))
    return figure


def probe_bad_inputs(srv):
    """Every kind of bad_inputs.py: a 4xx, never a 5xx or a timeout."""
    base = srv.base
    unserved = bad_inputs.unserved_routes(base)
    results = bad_inputs.run_all(base, timeout=30, budget_s=BAD_INPUTS_BUDGET_S)
    bad = bad_inputs.failures(results, unserved)
    slowest = max(results, key=lambda r: r[2])
    skipped = sum(1 for name, status, _ in results
                  if status == 501 and bad_inputs.path_of(name) in unserved)
    figure = (f"{len(results) - len(bad)}/{len(results)} answered 4xx"
              f"{f' ({skipped} 501 on unserved ' + ','.join(sorted(unserved)) + ')' if skipped else ''}"
              f", slowest {ms(slowest[2])}")
    shown = "; ".join(f"{name} -> {status}" for name, status, _ in bad[:25])
    expect(not bad, figure, f"{len(bad)} not answered 4xx: {shown}"
           f"{' ...' if len(bad) > 25 else ''}")
    return figure


# ---------------------------------------------------------------------------------------------
# Slow and stalled clients


def open_stalled(port, count, data, source=None):
    socks, opened = [], {}
    for _ in range(count):
        s = lib.connect(port, source=source, timeout=5)
        if data:
            s.sendall(data)
        socks.append(s)
        opened[s] = time.monotonic()
    return socks, opened


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def probe_stalled_connections(srv):
    """300 connections stalled mid-headers: /health p99 < 100 ms and a 16-token completion
    meanwhile, then every one of them closed within header-timeout + 2 s."""
    limit = HEADER_TIMEOUT_S + CLOSE_GRACE_S
    socks, opened = open_stalled(srv.port, STALLED_SOCKETS,
                                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    try:
        watched = {}
        until = max(opened.values()) + limit + 3
        watcher = threading.Thread(
            target=lambda: watched.update(zip(("closed", "got"), lib.watch_closed(socks, until))))
        watcher.start()
        latencies, statuses = [], []
        health_until = time.monotonic() + HEALTH_BUDGET_S
        for _ in range(HEALTH_SAMPLES):
            if time.monotonic() > health_until:
                break
            status, seconds = lib.health(srv.port, timeout=HEALTH_BUDGET_S)
            statuses.append(status)
            latencies.append(seconds)
        measured_at = time.monotonic()
        status, data, comp_s = lib.request(srv.port, "POST", "/v1/completions",
                                           {"prompt": PROMPT, "max_tokens": 16, "temperature": 0},
                                           timeout=REQUEST_TIMEOUT_S)
        watcher.join()
        closed = watched.get("closed", {})
        p99 = lib.percentile(latencies, 99)
        delays = [closed[s] - opened[s] for s in socks if s in closed]
        late = [s for s in socks if s not in closed or closed[s] - opened[s] > limit]
        early = [s for s in socks if s in closed and closed[s] < measured_at]
        tokens = None
        if status == 200:
            tokens = json.loads(data).get("usage", {}).get("completion_tokens")
        figure = (f"/health p99 {ms(p99)}, completion {status} in {comp_s:.2f} s; "
                  f"{len(closed)}/{len(socks)} closed, slowest {max(delays, default=0):.2f} s "
                  f"(limit {limit:g} s)")
        expect(len(statuses) == HEALTH_SAMPLES, figure,
               f"only {len(statuses)} of {HEALTH_SAMPLES} /health answers in {HEALTH_BUDGET_S:g} s")
        expect(all(s == 200 for s in statuses), figure,
               f"/health answered {sorted(set(map(str, statuses)))} during the stall")
        expect(p99 < HEALTH_P99_LIMIT_S, figure,
               f"/health p99 {p99 * 1000:.0f} ms (limit {HEALTH_P99_LIMIT_S * 1000:.0f} ms)")
        expect(status == 200 and tokens == 16, figure,
               f"the completion answered {status} with {tokens} tokens: {data[:120]!r}")
        expect(not early, figure,
               f"{len(early)} stalled connections were closed before the measurements ended "
               "(they did not overlap)")
        expect(not late, figure, f"{len(late)} stalled connections still open "
               f"{limit:g} s after they stalled")
        return figure
    finally:
        close_all(socks)


def probe_trickle(srv):
    """20 connections sending a header byte every 0.5 s: closed within header-timeout + 2 s
    (the deadline is the whole header's, not a byte's)."""
    limit = HEADER_TIMEOUT_S + CLOSE_GRACE_S
    header = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Trickle: " + b"t" * 10000
    socks, opened = open_stalled(srv.port, TRICKLE_SOCKETS, header[:1])
    sent = {s: 1 for s in socks}
    last = [time.monotonic()]

    def trickle(now, closed):
        if now - last[0] < TRICKLE_INTERVAL_S:
            return
        last[0] = now
        for s in socks:
            if s in closed:
                continue
            try:
                s.send(header[sent[s]:sent[s] + 1])
                sent[s] += 1
            except OSError:
                pass

    try:
        closed, _ = lib.watch_closed(socks, max(opened.values()) + limit + 3, on_tick=trickle)
        delays = [closed[s] - opened[s] for s in socks if s in closed]
        late = [s for s in socks if s not in closed or closed[s] - opened[s] > limit]
        figure = (f"{len(closed)}/{len(socks)} closed, slowest {max(delays, default=0):.2f} s "
                  f"after {max(sent.values())} bytes (limit {limit:g} s)")
        expect(not late, figure, f"{len(late)} trickling connections still open after "
               f"{limit:g} s")
        return figure
    finally:
        close_all(socks)


def probe_slow_body(srv):
    """Headers with Content-Length 1000, then 10 body bytes and a stall: 408 or closed within
    body-timeout + 2 s."""
    limit = BODY_TIMEOUT_S + CLOSE_GRACE_S
    s = lib.connect(srv.port)
    try:
        s.sendall(head_of("POST", "/tokenize", "Content-Type: application/json",
                          f"Content-Length: {SLOW_BODY_LENGTH}"))
        t0 = time.monotonic()
        s.sendall(b'{"content"'[:SLOW_BODY_SENT])
        reader = lib.Reader(s)
        try:
            status, _, _ = reader.head(t0 + limit + 3)
        except socket.timeout:
            status = "still open"
        seconds = time.monotonic() - t0
        figure = f"{status if status is not None else 'closed'} after {seconds:.2f} s (limit {limit:g} s)"
        expect(status in (408, None), figure,
               f"expected 408 or a close, got {status} after {seconds:.1f} s")
        expect(seconds <= limit, figure, f"the server waited {seconds:.2f} s for the body")
        return figure
    finally:
        s.close()


def probe_per_client_cap(srv):
    """600 idle connections from 127.0.0.5: at most 512 stay open, the rest are closed at once;
    /health from 127.0.0.1 still answers."""
    socks, failed = [], 0
    t0 = time.monotonic()
    for _ in range(PER_CLIENT_OPEN):
        try:
            socks.append(lib.connect(srv.port, source=PER_CLIENT_SOURCE, timeout=2))
        except OSError:
            failed += 1
    try:
        t1 = time.monotonic()
        status, health_s = lib.health(srv.port, timeout=10)
        # Look before the header timeout closes the idle ones too.
        check_at = min(t1 + 1.0, t0 + HEADER_TIMEOUT_S - 0.3)
        time.sleep(max(0.0, check_at - time.monotonic()))
        closed, got = lib.watch_closed(socks, time.monotonic() + 0.1)
        refused = [s for s in socks if s in closed or s in got]
        with_503 = sum(1 for s in refused if got.get(s, b"").startswith(b"HTTP/1.1 503"))
        kept = len(socks) - len(refused)
        figure = (f"{kept} of {PER_CLIENT_OPEN} kept, {len(refused) + failed} refused "
                  f"({with_503} with a 503, {failed} connects failed), /health {status} "
                  f"in {ms(health_s)}")
        expect(status == 200, figure, f"/health from 127.0.0.1 answered {status}")
        expect(kept <= PER_CLIENT_CAP, figure,
               f"{kept} connections from {PER_CLIENT_SOURCE} stayed open (cap {PER_CLIENT_CAP})")
        expect(kept >= min(PER_CLIENT_CAP, PER_CLIENT_OPEN) - 5, figure,
               f"only {kept} kept: connections below the cap were closed too")
        return figure
    finally:
        close_all(socks)


# ---------------------------------------------------------------------------------------------
# Connections reused


def probe_keepalive_pipelining(srv):
    """Two pipelined GET /health: two 200s; GET /health + GET /nope pipelined: 200 then 404 in
    that order; POST /tokenize then GET /health on one kept-alive connection: both answer."""
    results = []
    s = lib.connect(srv.port)
    try:
        s.sendall(head_of("GET", "/health") * 2)
        reader = lib.Reader(s)
        deadline = time.monotonic() + 10
        results += [reader.response(deadline)[0], reader.response(deadline)[0]]
    finally:
        s.close()
    s = lib.connect(srv.port)
    try:
        s.sendall(head_of("GET", "/health") + head_of("GET", "/no-such-route"))
        reader = lib.Reader(s)
        deadline = time.monotonic() + 10
        results += [reader.response(deadline)[0], reader.response(deadline)[0]]
    finally:
        s.close()
    s = lib.connect(srv.port)
    try:
        reader = lib.Reader(s)
        body = json.dumps({"content": "Hello"}).encode()
        s.sendall(head_of("POST", "/tokenize", "Content-Type: application/json",
                          f"Content-Length: {len(body)}") + body)
        results.append(reader.response(time.monotonic() + 10)[0])
        s.sendall(head_of("GET", "/health"))
        results.append(reader.response(time.monotonic() + 10)[0])
    finally:
        s.close()
    want = [200, 200, 200, 404, 200, 200]
    figure = "answers " + " ".join(map(str, results))
    expect(results == want, figure, f"expected {want}")
    return figure


# ---------------------------------------------------------------------------------------------
# Clients that vanish


def probe_random_disconnects(srv):
    """200 completions (streamed or not) whose clients vanish at random moments: within 10 s no
    request runs or waits and no KV block is held; /health still answers."""
    cancelled_before = lib.metric_sum(srv.base, "vllm:request_success_total",
                                      finished_reason="cancelled")
    t0 = time.monotonic()
    modes = lib.disconnect_storm(srv.port, DISCONNECTS, seed=7, workers=DISCONNECT_WORKERS,
                                 budget_s=DISCONNECTS_BUDGET_S)
    storm_s = time.monotonic() - t0
    idle, idle_s, values = lib.wait_idle(srv.base, IDLE_WITHIN_S)
    status, _ = lib.health(srv.port)
    cancelled = lib.metric_sum(srv.base, "vllm:request_success_total",
                               finished_reason="cancelled") - cancelled_before
    figure = (f"{DISCONNECTS} vanished in {storm_s:.1f} s ({cancelled:.0f} cancelled), idle "
              f"{'after ' + format(idle_s, '.1f') + ' s' if idle else 'never'}; "
              f"{' '.join(f'{k}={v}' for k, v in sorted(modes.items()))}")
    expect("skipped" not in modes, figure,
           f"{modes.get('skipped')} clients not started within {DISCONNECTS_BUDGET_S:g} s")
    expect(idle, figure, f"after {IDLE_WITHIN_S:g} s: {lib.idle_summary(values)}")
    expect(status == 200, figure, f"/health answered {status}")
    return figure


PROBES = [
    ("chunked-100MiB-413", probe_chunked_100mib),
    ("content-length-huge-413", probe_huge_content_length),
    ("expect-100-huge-413", probe_expect_continue_huge),
    ("expect-100-continue", probe_expect_continue_small),
    ("content-length-malformed-400", probe_malformed_content_length),
    ("headers-10000-431", probe_many_headers),
    ("header-64KiB-431", probe_big_header),
    ("content-encoding-gzip-415", probe_gzip_body),
    ("json-out-of-range-400", probe_json_out_of_range),
    ("chat-roles", probe_chat_roles),
    ("keepalive-pipelining", probe_keepalive_pipelining),
    ("stalled-connections", probe_stalled_connections),
    ("trickle-headers", probe_trickle),
    ("slow-body", probe_slow_body),
    ("per-client-cap", probe_per_client_cap),
    ("bad-inputs-4xx", probe_bad_inputs),
    ("random-disconnects", probe_random_disconnects),
]


class Runner:
    def __init__(self, inferd, model):
        self.inferd, self.model = inferd, model
        self.flags = BASE_FLAGS + SERVER_FLAGS
        self.srv = lib.start_server(inferd, model, self.flags)

    def restart(self):
        self.srv.stop()
        self.srv = lib.start_server(self.inferd, self.model, self.flags)

    def run(self, name, probe):
        t0 = time.monotonic()
        try:
            figure = probe(self.srv)
            ok, reason = True, ""
        except ProbeFailure as e:
            ok, figure, reason = False, e.figure, str(e)
        except Exception as e:  # a probe's own error is a failure too, with its trace
            ok, figure = False, f"{type(e).__name__}"
            reason = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
        if not self.srv.alive():
            ok = False
            reason = (f"the server exited (code {self.srv.proc.returncode}) during the probe; "
                      f"its last lines:\n{self.srv.tail()}\n{reason}")
            self.restart()
        seconds = time.monotonic() - t0
        print(f"{name:30s} {'PASS' if ok else 'FAIL'}  {figure}  [{seconds:.1f} s]", flush=True)
        return ok, reason


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: probes_test.py INFERD_BINARY [PROBE ...]")
    inferd = sys.argv[1]
    wanted = sys.argv[2:]
    global RSS_GROWTH_LIMIT_MB
    with open(inferd, "rb") as f:
        if b"__asan_init" in f.read():
            RSS_GROWTH_LIMIT_MB = RSS_GROWTH_LIMIT_SANITIZED_MB
            print(f"(an AddressSanitizer build: RSS bound {RSS_GROWTH_LIMIT_MB:g} MB)")
    model = lib.find_model()
    if not model:
        print("SKIP: no model (set INFERD_MODEL, or let scripts/fetch-model fetch it)")
        sys.exit(77)
    probes = [(n, p) for n, p in PROBES if not wanted or any(n.startswith(w) for w in wanted)]
    if not probes:
        sys.exit(f"no probe matches {wanted}; probes: {', '.join(n for n, _ in PROBES)}")
    t0 = time.monotonic()
    runner = Runner(inferd, model)
    print(f"inferd serve on port {runner.srv.port} (pid {runner.srv.pid}) with "
          f"{' '.join(runner.flags)}", flush=True)
    failures = []
    try:
        for name, probe in probes:
            if time.monotonic() - t0 > TOTAL_BUDGET_S:
                print(f"{name:30s} FAIL  not run  [0.0 s]", flush=True)
                failures.append((name, f"not run: the {TOTAL_BUDGET_S:g} s budget was spent"))
                continue
            ok, reason = runner.run(name, probe)
            if not ok:
                failures.append((name, reason))
    finally:
        code = runner.srv.stop()
    print(f"{len(probes) - len(failures)}/{len(probes)} probes passed in "
          f"{time.monotonic() - t0:.0f} s")
    if code not in (0, None, -15):
        failures.append(("server exit", f"inferd serve exited with {code} when stopped:\n"
                         f"{runner.srv.tail()}"))
    for name, reason in failures:
        print(f"\nFAIL {name}: {reason}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
