"""Starts `inferd serve` on a free loopback port for the server tests and stops it after."""
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import urllib.request


# The tools of the function-calling tests: one with arguments, one without.
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                     "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"]}}}
CLOCK_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}


class Server:
    def __init__(self, inferd, model, *extra):
        self.proc = subprocess.Popen(
            [inferd, "serve", "-m", model, "--port", "0", *extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.port = None
        self.log = []
        deadline = time.time() + 120
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("inferd serve exited early:\n" + "".join(self.log))
            self.log.append(line)
            m = re.search(r"serving on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("inferd serve did not start")
        self.base = f"http://127.0.0.1:{self.port}"

    def metrics(self):
        text = urllib.request.urlopen(self.base + "/metrics", timeout=10).read().decode()
        values = {}
        for line in text.splitlines():
            if line.startswith("#") or not line:
                continue
            name, value = line.rsplit(" ", 1)
            values[re.sub(r"\{.*\}", "", name) if "bucket" not in name else name] = float(value)
        return values, text

    def post(self, path, body, headers=None, raw=None):
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def post_stream(self, path, body):
        """The JSON events of a streamed (SSE) response, [DONE] left out."""
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(req, timeout=60) as r:
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
        return events

    def end_process(self):
        """SIGTERM, then SIGKILL after 30 s."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        self.end_process()
        # Drain what it printed, for a failing test's log.
        rest = self.proc.stderr.read()
        if rest:
            self.log.append(rest)
        return self.proc.returncode


def args():
    if len(sys.argv) < 2:
        sys.exit("usage: test.py INFERD_BINARY")
    model = os.environ.get("INFERD_MODEL", "")
    if not model or not os.path.exists(model):
        print("SKIP: no model (set INFERD_MODEL)")
        sys.exit(77)
    return sys.argv[1], model


def import_gguf(*needed):
    """gguf-py (llama.cpp's GGUF reader and writer) from the llama.cpp sources in
    INFERD_LLAMA_SRC, with numpy, which it needs: (the module, the sources' path). Exits 77
    (skip) without them or without one of the sources' files `needed` names."""
    src = os.environ.get("INFERD_LLAMA_SRC", "")
    if not os.path.isdir(os.path.join(src, "gguf-py")) or \
            not all(os.path.isfile(os.path.join(src, p)) for p in needed):
        print("SKIP: no llama.cpp sources (INFERD_LLAMA_SRC)")
        sys.exit(77)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("SKIP: no numpy")
        sys.exit(77)
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    import gguf
    return gguf, src


def write_lora_adapter(gguf, model, path, rank=8, alpha=16.0):
    """A seeded random LoRA adapter (llama.cpp's GGUF form) for every attention and feed-forward
    projection of `model`, values in [-0.06, 0.06] (alpha / rank 2): enough to move SmolLM2's
    greedy text. gguf: import_gguf()'s module."""
    import numpy as np
    targets = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    reader = gguf.GGUFReader(model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = gguf.GGUFWriter(path, arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    writer.add_string("adapter.lora.task_name", "e2e")
    rng = np.random.default_rng(2026)
    for t in reader.tensors:
        if not t.name.startswith("blk.") or not any(f".{s}.weight" in t.name for s in targets):
            continue
        n_in, n_out = int(t.shape[0]), int(t.shape[1])  # ggml order: [in, out]
        a = rng.uniform(-0.06, 0.06, (rank, n_in)).astype(np.float32)   # ggml [in, rank]
        b = rng.uniform(-0.06, 0.06, (n_out, rank)).astype(np.float32)  # ggml [rank, out]
        writer.add_tensor(t.name + ".lora_a", a)
        writer.add_tensor(t.name + ".lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def make_golden():
    """tests/golden/architectures/make-golden as a module: its random-weight models of each family."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "architectures",
                        "make-golden")
    loader = importlib.machinery.SourceFileLoader("make_golden", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("make_golden", loader))
    loader.exec_module(module)
    return module


def stream_chat(client, **kw):
    """A streamed chat answer of the openai client joined: (reasoning, content, calls by index,
    finish)."""
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in client.chat.completions.create(model="", stream=True, **kw):
        for choice in chunk.choices:
            delta = choice.delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"name": "", "arguments": "", "id": None})
                entry["id"] = entry["id"] or call.id
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return reasoning, content, calls, finish
