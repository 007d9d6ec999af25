"""The server under concurrent load: 32 simultaneous greedy streams all complete and each equals
the same request sent alone; 200 clients that vanish (while queued, mid-stream, before reading
anything) leave no KV block in use and the server still answers."""
import concurrent.futures
import http.client
import json
import random
import sys
import time

import openai

from server_harness import Server, args

INFERD, MODEL = args()

PROMPTS = [f"Story {i}: once upon a time in a village of {w}" for i, w in enumerate(
    ["bakers", "sailors", "painters", "miners", "weavers", "farmers", "poets", "smiths"] * 4)]


def stream_text(c, prompt, max_tokens):
    chunks = c.completions.create(model="", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                  stream=True)
    return "".join(ch.choices[0].text for ch in chunks if ch.choices)


def check_concurrent_equals_alone(server):
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=300)
    alone = [stream_text(c, p, 24) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: stream_text(c, p, 24), PROMPTS))
    bad = [i for i, (a, b) in enumerate(zip(alone, together)) if a != b]
    assert len(together) == 32 and all(together), "a stream came back empty"
    assert not bad, f"{len(bad)} of 32 differ, e.g. {alone[bad[0]]!r} vs {together[bad[0]]!r}"
    print(f"concurrency: 32 simultaneous greedy streams equal the same requests alone")


def vanish(server, rng, mode):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    # Long enough that a request nobody cancels would still hold its blocks at the check.
    body = {"prompt": rng.choice(PROMPTS), "max_tokens": 900, "ignore_eos": True,
            "temperature": 0.7, "stream": mode != "whole"}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    if mode == "queued":  # gone before any answer
        conn.sock.close()
        return
    if mode == "whole":  # gives up while its answer is generated (it comes whole, at the end)
        time.sleep(rng.uniform(0.05, 0.5))
        conn.sock.close()
        return
    response = conn.getresponse()
    if mode == "mid-stream":
        for _ in range(rng.randint(1, 6)):
            response.fp.readline()
    conn.sock.close()
    conn.close()


def check_disconnects_free_blocks(server):
    rng = random.Random(7)
    modes = ["queued", "mid-stream", "whole"]
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        list(pool.map(lambda i: vanish(server, random.Random(i), modes[i % 3]), range(200)))
    deadline = time.time() + 60
    while True:
        values, _ = server.metrics()
        used = values["inferd:kv_blocks_used"]
        running = values["vllm:num_requests_running"] + values["vllm:num_requests_waiting"]
        if used == 0 and running == 0:
            break
        if time.time() > deadline:
            raise AssertionError(f"after 200 disconnects: {used} KV blocks and {running} requests "
                                 "still held")
        time.sleep(0.2)
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=60)
    r = c.completions.create(model="", prompt="The capital of France is", max_tokens=4,
                             temperature=0)
    assert r.usage.completion_tokens == 4
    _, text = server.metrics()
    line = next(l for l in text.splitlines()
                if l.startswith("vllm:request_success_total") and 'finished_reason="cancelled"' in l)
    cancelled = float(line.rsplit(" ", 1)[1])
    assert cancelled == 200, f"{cancelled} of 200 vanished clients were cancelled"
    print(f"disconnects: 200 clients vanished, all cancelled, 0 KV blocks in use afterwards, "
          "server answers")


def main():
    server = Server(INFERD, MODEL, "-c", "1024", "--max-seqs", "8")
    try:
        check_concurrent_equals_alone(server)
        check_disconnects_free_blocks(server)
    except Exception:
        server.stop()
        sys.stderr.write("".join(server.log[-20:]))
        raise
    code = server.stop()
    sys.exit(0 if code in (0, -15) else f"server exit code {code}")


if __name__ == "__main__":
    main()
