"""LoRA adapters chosen per request, as llama-server and vLLM let clients choose them: GET/POST
/lora-adapters and a request's `lora` [{id, scale}] (llama-server), an adapter named by
--lora-modules and chosen by a request's "model" (vLLM, listed by /v1/models). A random rank-8
adapter for the default model, written here with gguf-py, moves SmolLM2's greedy text; the
server is started with it twice (--lora at scale 0 with --lora-init-without-apply, and as the
module "tuned"), so every way of turning the same adapter on must give the same text, requests
with different adapters run at once without changing each other's text, and the prefix cache
keeps their blocks apart."""
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request

import openai

from server_harness import Server, args, import_gguf, write_lora_adapter

INFERD, MODEL = args()
gguf, _ = import_gguf()

PROMPT = "The three most important inventions of the last century are"
server = None
adapter = None


def get(path):
    with urllib.request.urlopen(server.base + path, timeout=60) as r:
        return json.loads(r.read())


def complete(**extra):
    """/completion's greedy text and what it echoes of the request's adapters."""
    status, body = server.post("/completion", {"prompt": PROMPT, "n_predict": 16,
                                               "temperature": 0, **extra})
    assert status == 200, body
    return body["content"], body["generation_settings"]["lora"]


def oai_text(model, prompt=PROMPT, max_tokens=16, **extra):
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)
    r = c.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                             extra_body=extra)
    return r


class LoraRoutes(unittest.TestCase):
    def setUp(self):
        # Every test starts from the scales the server started with.
        self.assertEqual(server.post("/lora-adapters", [])[0], 200)

    def test_lists_the_adapters_and_the_module_as_a_model(self):
        listed = get("/lora-adapters")
        self.assertEqual([(a["id"], a["path"], a["scale"]) for a in listed],
                         [(0, adapter, 0.0), (1, adapter, 0.0)])
        self.assertEqual(listed[0]["task_name"], "e2e")
        self.assertEqual(listed[1]["name"], "tuned")
        models = {m["id"]: m for m in get("/v1/models")["data"]}
        self.assertEqual(models["tuned"]["parent"], "base")
        self.assertEqual(models["tuned"]["root"], adapter)

    def test_every_way_to_apply_the_adapter_gives_its_text(self):
        base, settings = complete()
        self.assertEqual(settings, [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}])
        adapted, settings = complete(lora=[{"id": 0, "scale": 1.0}])
        self.assertEqual(settings, [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.0}])
        self.assertNotEqual(adapted, base)
        self.assertEqual(complete(lora=[{"id": 1, "scale": 1}])[0], adapted)
        by_name = oai_text("tuned")
        self.assertEqual(by_name.choices[0].text, adapted)
        self.assertEqual(by_name.model, "tuned")
        self.assertEqual(oai_text("base").choices[0].text, base)
        # Half the scale is neither.
        half = complete(lora=[{"id": 0, "scale": 0.5}])[0]
        self.assertNotIn(half, (base, adapted))
        # The server's scales, for requests that give none; a request's own replace them.
        status, body = server.post("/lora-adapters", [{"id": 0, "scale": 1.0}])
        self.assertEqual((status, body), (200, {"success": True}))
        self.assertEqual([a["scale"] for a in get("/lora-adapters")], [1.0, 0.0])
        self.assertEqual(complete()[0], adapted)
        self.assertEqual(complete(lora=[])[0], adapted)  # an empty list is none, as llama-server
        self.assertEqual(complete(lora=[{"id": 0, "scale": 0}])[0], base)
        self.assertEqual(oai_text("base").choices[0].text, adapted)

    def test_chat_routes_take_the_adapter(self):
        ask = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16,
               "temperature": 0}
        on = [{"id": 0, "scale": 1}]

        def chat(**extra):
            status, body = server.post("/v1/chat/completions", {**ask, **extra})
            self.assertEqual(status, 200, body)
            return body["choices"][0]["message"]["content"]

        def anthropic(**extra):
            status, body = server.post("/v1/messages", {"model": "base", **ask, **extra})
            self.assertEqual(status, 200, body)
            return "".join(b["text"] for b in body["content"] if b["type"] == "text")

        def responses(**extra):
            status, body = server.post("/v1/responses", {
                "model": "base", "input": ask["messages"][0]["content"], "max_output_tokens": 16,
                "temperature": 0, **extra})
            self.assertEqual(status, 200, body)
            return "".join(c["text"] for item in body["output"] if item["type"] == "message"
                           for c in item["content"] if c["type"] == "output_text")

        adapted = chat(lora=on)
        self.assertNotEqual(chat(), adapted)
        self.assertEqual(chat(model="tuned"), adapted)
        self.assertEqual(anthropic(lora=on), adapted)
        self.assertEqual(anthropic(model="tuned"), adapted)
        self.assertEqual(responses(lora=on), adapted)
        self.assertEqual(responses(model="tuned"), adapted)

    def test_requests_with_different_adapters_run_together(self):
        cases = [{}, {"lora": [{"id": 0, "scale": 1}]}, {"lora": [{"id": 0, "scale": 0.5}]},
                 {"lora": [{"id": 1, "scale": 1}]}]
        alone = [complete(**c)[0] for c in cases]
        together = [None] * len(cases)

        def run(i):
            together[i] = complete(**cases[i])[0]
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(together, alone)

    def test_prefix_cache_keeps_adapters_apart(self):
        prompt = ("A long preamble that requests with different adapters send alike, so that "
                  "only the same adapter may take its cached blocks. ") * 3
        first = oai_text("base", prompt, 2, cache_salt="e2e-lora")
        tuned = oai_text("tuned", prompt, 2, cache_salt="e2e-lora")
        again = oai_text("tuned", prompt, 2, cache_salt="e2e-lora")
        self.assertEqual(first.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertEqual(tuned.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertGreater(again.usage.prompt_tokens_details.cached_tokens, 32)
        self.assertEqual(again.choices[0].text, tuned.choices[0].text)

        # /completion keys by cache_salt too (bench/lora-cost relies on it).
        def computed(salt):
            status, body = server.post("/completion", {"prompt": prompt, "n_predict": 1,
                                                       "cache_salt": salt})
            self.assertEqual(status, 200, body)
            return body["timings"]["prompt_n"]
        whole = computed("e2e-native-1")
        self.assertLess(computed("e2e-native-1"), whole - 32)
        self.assertEqual(computed("e2e-native-2"), whole)

    def test_bad_adapters_are_400s_naming_lora(self):
        for lora in ([{"id": 2, "scale": 1}], "all", [{"scale": 1}], [{"id": 0, "scale": "x"}],
                     [3]):
            status, body = server.post("/completion", {"prompt": "Hi", "n_predict": 1,
                                                       "lora": lora})
            self.assertEqual(status, 400, lora)
            self.assertEqual(body["error"]["param"], "lora", body)
        status, body = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1,
                                                       "lora": [{"id": 7}]})
        self.assertEqual(status, 400)
        self.assertIn("ids 0 to 1", body["error"]["message"])
        for bad in ({"id": 0, "scale": 1}, [{"id": 9, "scale": 1}]):
            self.assertEqual(server.post("/lora-adapters", bad)[0], 400, bad)
        self.assertEqual([a["scale"] for a in get("/lora-adapters")], [0.0, 0.0])
        # --strict-model-name: a module's name is served, another name is not.
        status, body = server.post("/v1/completions", {"model": "other", "prompt": "Hi",
                                                       "max_tokens": 1})
        self.assertEqual(status, 404, body)


class LoraCommandLine(unittest.TestCase):
    def test_malformed_module_and_no_adapters(self):
        out = subprocess.run([INFERD, "serve", "-m", MODEL, "--port", "0", "--lora-modules",
                              "no-path"], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--lora-modules takes NAME=PATH", out.stderr)
        out = subprocess.run([INFERD, "serve", "-m", MODEL, "--port", "0", "--lora-modules",
                              f"a={adapter}", f"a={adapter}"], capture_output=True, text=True,
                             timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("'a' is given twice", out.stderr)
        plain = Server(INFERD, MODEL, "-c", "256", "--max-seqs", "1")
        try:
            status, body = plain.post("/completion", {"prompt": "Hi", "n_predict": 1,
                                                      "lora": [{"id": 0, "scale": 1}]})
            self.assertEqual(status, 400)
            self.assertIn("no LoRA adapters", body["error"]["message"])
            self.assertEqual(plain.post("/completion", {"prompt": "Hi", "n_predict": 1,
                                                        "lora": []})[0], 200)
            with urllib.request.urlopen(plain.base + "/lora-adapters", timeout=60) as r:
                self.assertEqual(json.loads(r.read()), [])
        finally:
            plain.stop()


if __name__ == "__main__":
    directory = tempfile.mkdtemp(prefix="inferd-lora-")
    adapter = os.path.join(directory, "random-lora.gguf")
    write_lora_adapter(gguf, MODEL, adapter)
    server = Server(INFERD, MODEL, "-c", "1024", "--max-seqs", "4", "--served-model-name", "base",
                    "--strict-model-name", "--lora", adapter, "--lora-init-without-apply",
                    "--enable-lora", "--lora-modules", f"tuned={adapter}")
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        server.stop()
