#!/usr/bin/env python3
"""Checks bench/serve-load without a real model server: the metric math (percentiles, TPOT,
throughputs), the seeded prompt sets and arrivals, the stream parsing, and one short load run
against a fake streaming server on loopback (skipped when aiohttp is not installed)."""
import http.server
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "serve-load")

# The script has no .py suffix (it is run as a command), so load it by path.
_loader = importlib.machinery.SourceFileLoader("serve_load", SCRIPT)
_spec = importlib.util.spec_from_loader("serve_load", _loader)
sl = importlib.util.module_from_spec(_spec)
_loader.exec_module(sl)

try:
    import aiohttp  # noqa: F401
    HAVE_AIOHTTP = True
except ImportError:
    HAVE_AIOHTTP = False


class Percentiles(unittest.TestCase):
    def test_interpolates_between_ranks(self):
        self.assertEqual(sl.percentile([4, 1, 3, 2], 50), 2.5)
        self.assertAlmostEqual(sl.percentile(list(range(1, 101)), 99), 99.01)
        self.assertEqual(sl.percentile([1, 2, 3, 4, 5], 0), 1)
        self.assertEqual(sl.percentile([1, 2, 3, 4, 5], 100), 5)

    def test_edges(self):
        self.assertIsNone(sl.percentile([], 50))
        self.assertEqual(sl.percentile([7.0], 99), 7.0)


class Tpot(unittest.TestCase):
    def test_excludes_the_first_token(self):
        r = sl.Result(ok=True, output_tokens=5, ttft=0.2, e2e=1.0)
        self.assertAlmostEqual(sl.tpot(r), 0.2)

    def test_undefined_for_one_token(self):
        self.assertIsNone(sl.tpot(sl.Result(ok=True, output_tokens=1, ttft=0.2, e2e=0.2)))


class Summary(unittest.TestCase):
    def test_figures(self):
        results = [
            sl.Result(ok=True, prompt_tokens=100, output_tokens=3, requested_tokens=3, usage_reported=True,
                      ttft=0.5, itl=[0.1, 0.3], e2e=0.9),
            sl.Result(ok=True, prompt_tokens=50, output_tokens=2, requested_tokens=4, usage_reported=False,
                      ttft=1.5, itl=[0.2], e2e=1.7),
            sl.Result(ok=False, error="HTTP 503: busy", requested_tokens=4),
        ]
        s = sl.summarize(results, 2.0)
        self.assertEqual((s["completed"], s["failed"]), (2, 1))
        self.assertEqual(s["errors"], {"HTTP 503: busy": 1})
        self.assertEqual(s["short_outputs"], 1)
        self.assertEqual(s["usage_missing"], 1)
        self.assertAlmostEqual(s["request_throughput"], 1.0)
        self.assertAlmostEqual(s["output_throughput"], 2.5)
        self.assertAlmostEqual(s["total_throughput"], 77.5)
        self.assertAlmostEqual(s["ttft"]["mean_ms"], 1000.0)
        self.assertAlmostEqual(s["ttft"]["median_ms"], 1000.0)
        self.assertAlmostEqual(s["ttft"]["p99_ms"], 1490.0)
        # TPOT per request: (0.9 - 0.5) / 2 = 0.2 and (1.7 - 1.5) / 1 = 0.2.
        self.assertAlmostEqual(s["tpot"]["mean_ms"], 200.0)
        # ITL pools every gap of every request: 0.1, 0.2, 0.3.
        self.assertAlmostEqual(s["itl"]["mean_ms"], 200.0)
        self.assertAlmostEqual(s["itl"]["median_ms"], 200.0)
        self.assertAlmostEqual(s["e2el"]["median_ms"], 1300.0)

    def test_nothing_completed(self):
        s = sl.summarize([sl.Result(error="x")], 0.0)
        self.assertEqual(s["failed"], 1)
        self.assertIsNone(s["ttft"]["p99_ms"])
        self.assertIsNone(s["output_throughput"])

    def test_rounds_combine_to_medians(self):
        a = sl.summarize([sl.Result(ok=True, output_tokens=10, ttft=1.0, e2e=2.0)], 1.0)
        b = sl.summarize([sl.Result(ok=True, output_tokens=30, ttft=3.0, e2e=4.0), sl.Result(error="e")], 1.0)
        c = sl.summarize([sl.Result(ok=True, output_tokens=20, ttft=2.0, e2e=3.0)], 1.0)
        m = sl.combine([a, b, c])
        self.assertEqual(m["output_throughput"], 20.0)
        self.assertEqual(m["ttft"]["p99_ms"], 2000.0)
        self.assertEqual((m["completed"], m["failed"]), (3, 1))
        # A round whose server never started has no throughput and does not count in the median.
        dead = sl.summarize([sl.Result(error="no server")], 0.0)
        self.assertEqual(sl.combine([a, dead])["output_throughput"], 10.0)


class Prompts(unittest.TestCase):
    def test_lengths_in_range_and_seeded(self):
        a = sl.random_prompts(200, 128, 64, 0.25, seed=3)
        self.assertEqual([p.text for p in a], [p.text for p in sl.random_prompts(200, 128, 64, 0.25, seed=3)])
        self.assertNotEqual(a[0].text, sl.random_prompts(1, 128, 64, 0.25, seed=4)[0].text)
        for p in a:
            self.assertTrue(96 <= p.input_len <= 160)
            self.assertTrue(48 <= p.output_len <= 80)
            # One word is one token, so the word count is the prompt length.
            self.assertEqual(len(p.text.split()), p.input_len)
        self.assertGreater(len({p.input_len for p in a}), 20)

    def test_fixed_lengths_with_ratio_zero(self):
        self.assertEqual({p.input_len for p in sl.random_prompts(20, 128, 32, 0.0, 0)}, {128})

    def test_chat_fills_topics(self):
        prompts = sl.chat_prompts(16, 32, 0.25, 0)
        self.assertEqual(len(prompts), 16)
        for p in prompts:
            self.assertEqual(p.messages[-1]["role"], "user")
            self.assertNotIn("{topic}", json.dumps(p.messages))
        # Repeats of a conversation share the earlier turns but not the last question's topic word.
        k = len(sl.CONVERSATIONS)
        self.assertEqual(prompts[0].messages[:-1], prompts[k].messages[:-1])

    def test_mixed_interleaves(self):
        prompts = sl.make_prompts("mixed", 7, 64, 16, 0.0, 0)
        self.assertEqual([p.messages is not None for p in prompts], [False, True] * 3 + [False])


class Arrivals(unittest.TestCase):
    def test_infinite_rate_sends_at_once(self):
        self.assertEqual(sl.arrival_gaps(5, math.inf, 0), [0.0] * 5)

    def test_poisson_mean_and_seed(self):
        gaps = sl.arrival_gaps(4000, 10.0, 1)
        self.assertEqual(gaps, sl.arrival_gaps(4000, 10.0, 1))
        self.assertAlmostEqual(sum(gaps) / len(gaps), 0.1, delta=0.01)


class Stream(unittest.TestCase):
    def test_events(self):
        self.assertEqual(sl.parse_event(": keep-alive"), (None, None))
        self.assertEqual(sl.parse_event(""), (None, None))
        self.assertEqual(sl.parse_event("data: [DONE]\n"), ("done", None))
        kind, chunk = sl.parse_event('data: {"choices":[{"text":" a","index":0}]}\n')
        self.assertEqual((kind, sl.chunk_text(chunk)), ("data", " a"))

    def test_chunk_text(self):
        self.assertEqual(sl.chunk_text({"choices": [{"delta": {"role": "assistant", "content": None}}]}), "")
        self.assertEqual(sl.chunk_text({"choices": [{"delta": {"content": "Hi"}}]}), "Hi")
        self.assertEqual(sl.chunk_text({"choices": [], "usage": {"completion_tokens": 3}}), "")

    def test_request_body(self):
        body = sl.request_body(sl.Prompt(output_len=9, input_len=2, text="a b"), "m")
        self.assertEqual((body["prompt"], body["max_tokens"], body["ignore_eos"], body["stream"]), ("a b", 9, True, True))
        self.assertEqual(body["stream_options"], {"include_usage": True})
        lora = {"lora": [{"id": 0, "scale": 1}]}
        body = sl.request_body(sl.Prompt(output_len=9, input_len=2, text="a b", extra=lora), "m")
        self.assertEqual((body["prompt"], body["lora"]), ("a b", lora["lora"]))


class FakeServer(http.server.BaseHTTPRequestHandler):
    """Streams max_tokens chunks: first after FIRST seconds, then one every GAP seconds, then a
    usage record; answers 500 to a prompt of 'fail' and breaks off after two chunks for 'cut'."""
    FIRST, GAP = 0.05, 0.01

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("prompt") == "fail":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "boom"}}')
            return
        chat = "messages" in body
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def event(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        if chat:
            event({"choices": [{"delta": {"role": "assistant", "content": None}}]})
        time.sleep(self.FIRST)
        for i in range(body["max_tokens"]):
            if i:
                time.sleep(self.GAP)
            event({"choices": [{"delta": {"content": f" t{i}"}} if chat else {"text": f" t{i}"}]})
            if i == 1 and body.get("prompt") == "cut":
                return
        event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": body["max_tokens"]}})
        self.wfile.write(b"data: [DONE]\n\n")


@unittest.skipUnless(HAVE_AIOHTTP, "aiohttp not installed (scripts/setup installs it)")
class LoadAgainstFakeServer(unittest.TestCase):
    def setUp(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_measures_and_counts_failures(self):
        prompts = [sl.Prompt(output_len=5, input_len=3, text="a b c"),
                   sl.Prompt(output_len=4, input_len=20, messages=[{"role": "user", "content": "hi"}]),
                   sl.Prompt(output_len=4, input_len=1, text="fail"),
                   sl.Prompt(output_len=4, input_len=1, text="cut")]
        results, duration = sl.asyncio.run(sl.run_load(self.url, prompts, "m", 2, math.inf, 0, 30))
        ok, chat, failed, cut = results
        self.assertTrue(ok.ok and chat.ok)
        self.assertFalse(failed.ok or cut.ok)
        self.assertIn("HTTP 500", failed.error)
        self.assertIn("[DONE]", cut.error)
        self.assertEqual((ok.output_tokens, ok.prompt_tokens, len(ok.itl)), (5, 11, 4))
        self.assertEqual((chat.output_tokens, len(chat.itl)), (4, 3))  # the role-only chunk is not a token
        for r in (ok, chat):
            self.assertGreaterEqual(r.ttft, FakeServer.FIRST)
            # Gaps are measured between chunks: never negative, adding up to at most the time
            # from the first token to the end. A single gap depends on when this (possibly busy)
            # process reads the socket, so only the whole is bounded by the server's pauses.
            self.assertTrue(all(gap >= 0 for gap in r.itl))
            self.assertLessEqual(sum(r.itl), r.e2e - r.ttft + 1e-6)
            self.assertGreaterEqual(r.e2e, FakeServer.FIRST + len(r.itl) * FakeServer.GAP)
            self.assertGreater(r.e2e, r.ttft)
        s = sl.summarize(results, duration)
        self.assertEqual((s["completed"], s["failed"], s["short_outputs"]), (2, 2, 0))


if __name__ == "__main__":
    unittest.main(verbosity=1)
