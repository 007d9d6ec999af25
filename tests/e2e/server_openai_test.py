"""The OpenAI-compatible server driven by the official `openai` client: completions and chat,
streaming and not, n, stop, seeds, logprobs, tokenize/detokenize, metrics, error objects."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import jsonschema
import openai

from server_harness import CLOCK_TOOL, WEATHER_TOOL, Server, args

API_KEY = "test-key"
INFERD, MODEL = args()
server = None


def client(key=API_KEY):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=120)


class Completions(unittest.TestCase):
    def test_greedy_text_usage_and_stream_agree(self):
        c = client()
        r = c.completions.create(model="", prompt="The capital of France is", max_tokens=12,
                                 temperature=0)
        self.assertIn("Paris", r.choices[0].text)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.usage.prompt_tokens, 5)
        chunks = list(c.completions.create(prompt="The capital of France is", model="",
                                           max_tokens=12, temperature=0, stream=True,
                                           stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        self.assertEqual(text, r.choices[0].text)
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)
        self.assertEqual([ch.choices[0].finish_reason for ch in chunks if ch.choices][-1], "length")

    def test_stop_string_ends_before_it(self):
        r = client().completions.create(model="", prompt="The capital of France is", max_tokens=16,
                                        temperature=0, stop=["aris"])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertTrue(r.choices[0].text.endswith(" P"), r.choices[0].text)

    def test_n_and_seed_reproduce(self):
        c = client()
        kw = dict(model="", prompt="Once upon a time", max_tokens=16, temperature=0.9, seed=1234)
        a = c.completions.create(n=2, **kw)
        b = c.completions.create(n=2, **kw)
        self.assertEqual(len(a.choices), 2)
        self.assertEqual([x.text for x in a.choices], [x.text for x in b.choices])
        self.assertEqual(sorted(x.index for x in a.choices), [0, 1])
        self.assertEqual(a.usage.completion_tokens, 32)

    def test_beam_search(self):
        c = client()
        kw = dict(model="", prompt="The capital of France is", max_tokens=12)
        beams = dict(use_beam_search=True, best_of=4, length_penalty=1.0)
        r = c.completions.create(n=2, extra_body=beams, **kw)
        self.assertEqual(sorted(x.index for x in r.choices), [0, 1])
        texts = [x.text for x in sorted(r.choices, key=lambda x: x.index)]
        self.assertTrue(all(texts), texts)
        self.assertNotEqual(texts[0], texts[1])
        one = c.completions.create(n=1, extra_body=beams, **kw)
        self.assertEqual(one.choices[0].text, texts[0])
        chunks = list(c.completions.create(n=2, stream=True, extra_body=beams, **kw))
        streamed = {}
        for ch in chunks:
            for x in ch.choices:
                streamed[x.index] = streamed.get(x.index, "") + x.text
        self.assertEqual([streamed[0], streamed[1]], texts)
        # The same search from the command line prints the best beam.
        import subprocess
        out = subprocess.run([INFERD, "run", "-m", MODEL, "--beams", "4", "-n", "12", "--no-stats",
                              "-p", "The capital of France is"], capture_output=True, text=True,
                             check=True).stdout
        self.assertEqual(out.rstrip("\n"), texts[0].rstrip("\n"))
        for bad in (dict(best_of=3), dict(use_beam_search=True, best_of=4, logprobs=2),
                    dict(use_beam_search=True, n=3, best_of=2)):
            with self.assertRaises(openai.BadRequestError):
                body = dict(bad)
                n = body.pop("n", 1)
                lp = body.pop("logprobs", None)
                c.completions.create(n=n, logprobs=lp, extra_body=body, **kw)

    def test_logprobs(self):
        r = client().completions.create(model="", prompt="The capital of France is", max_tokens=6,
                                        temperature=0, logprobs=3)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 6)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        for value, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(value, 0.0)
            self.assertEqual(len(top), 3)
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(max(top.values()), value, places=4)

    def test_echo_scores_the_prompt_as_generation_would(self):
        """Legacy scoring (lm-eval's local-completions): echo with logprobs gives each prompt
        token's logprob under the distribution before it, which a request that stops just
        before that token reports for its first output token."""
        c = client()
        prompt = "The capital of France is Paris. The capital of Germany is"
        req = urllib.request.Request(server.base + "/tokenize",
                                     data=json.dumps({"content": prompt}).encode(),
                                     headers={"Authorization": "Bearer " + API_KEY})
        with urllib.request.urlopen(req) as answer:
            ids = json.load(answer)["tokens"]
        scored = c.completions.create(model="", prompt=[ids], max_tokens=1, echo=True,
                                      logprobs=2, temperature=0)
        choice = scored.choices[0]
        lp = choice.logprobs
        self.assertTrue(choice.text.startswith(prompt))
        self.assertEqual(len(lp.tokens), len(ids) + 1)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertEqual("".join(lp.tokens), choice.text)
        for k in (3, len(ids) - 1):  # prompt token k, after the first k tokens
            after = c.completions.create(model="", prompt=ids[:k], max_tokens=1, temperature=0,
                                         logprobs=20).choices[0].logprobs.top_logprobs[0]
            token = lp.tokens[k]
            self.assertIn(token, after)
            self.assertAlmostEqual(lp.token_logprobs[k], after[token], places=3)
            self.assertEqual(len(lp.top_logprobs[k]), 2)
        # max_tokens 0: the prompt alone, no completion tokens.
        only = c.completions.create(model="", prompt=prompt, max_tokens=0, echo=True, logprobs=0,
                                    temperature=0)
        self.assertEqual(only.choices[0].text, prompt)
        self.assertEqual(only.usage.completion_tokens, 0)
        self.assertEqual(only.choices[0].logprobs.token_logprobs[1:], lp.token_logprobs[1:-1])
        # vLLM's prompt_logprobs: the token itself with its rank, then the alternatives.
        v = c.completions.create(model="", prompt=prompt, max_tokens=2, temperature=0,
                                 extra_body={"prompt_logprobs": 1}).model_dump()
        entries = v["choices"][0]["prompt_logprobs"]
        self.assertIsNone(entries[0])
        self.assertEqual(len(entries), len(ids))
        for k in range(1, len(ids)):
            mine = entries[k][str(ids[k])]
            self.assertAlmostEqual(mine["logprob"], lp.token_logprobs[k], places=4)
            self.assertGreaterEqual(mine["rank"], 1)
            self.assertLessEqual(len(entries[k]), 2)
        # The prompt's logprobs are not streamed: a 400 rather than a stream without them.
        with self.assertRaises(openai.BadRequestError):
            c.completions.create(model="", prompt=prompt, max_tokens=1, echo=True, logprobs=1,
                                 stream=True)
        # On chat, vLLM's prompt_logprobs come once, beside the choices.
        chat = c.chat.completions.create(model="", messages=[{"role": "user", "content": "Hi"}],
                                         max_tokens=2, extra_body={"prompt_logprobs": 0})
        entries = chat.model_dump()["prompt_logprobs"]
        self.assertIsNone(entries[0])
        self.assertEqual(len(entries), chat.usage.prompt_tokens)
        self.assertTrue(all(len(e) == 1 and list(e.values())[0]["logprob"] <= 0
                            for e in entries[1:]))

    def test_bad_words_never_appear(self):
        c = client()
        prompt = "The capital of France is Paris. The capital of France is"
        plain = c.completions.create(model="", prompt=prompt, max_tokens=8, temperature=0)
        self.assertIn("Paris", plain.choices[0].text)
        banned = c.completions.create(model="", prompt=prompt, max_tokens=8, temperature=0,
                                      extra_body={"bad_words": ["Paris"]})
        self.assertNotIn("Paris", banned.choices[0].text)
        for bad in ("Paris", ["Paris", 3], [""]):
            with self.assertRaises(openai.BadRequestError):
                c.completions.create(model="", prompt=prompt, max_tokens=2,
                                     extra_body={"bad_words": bad})
        with self.assertRaises(openai.BadRequestError):  # ranked by the model's logprobs
            c.completions.create(model="", prompt=prompt, max_tokens=2, extra_body={
                "bad_words": ["Paris"], "use_beam_search": True, "best_of": 2})

    def test_dry_breaks_a_greedy_loop(self):
        # Greedy SmolLM2 lists the days again and again; llama.cpp's DRY penalty (on the OpenAI
        # endpoints too, as llama-server takes it) makes every token run of more than
        # allowed_length + 1 tokens new within its window.
        c = client()
        prompt = "List the days of the week: Monday, Tuesday"
        args = dict(model="", prompt=prompt, max_tokens=40, temperature=0, logprobs=0)
        plain = c.completions.create(**args)
        dry = c.completions.create(**args, extra_body={
            "dry_multiplier": 5.0, "dry_allowed_length": 2, "dry_penalty_last_n": -1})

        def repeated_runs(tokens, length):
            runs = [tuple(tokens[i:i + length]) for i in range(len(tokens) - length + 1)]
            return len(runs) - len(set(runs))

        plain_tokens = plain.choices[0].logprobs.tokens
        dry_tokens = dry.choices[0].logprobs.tokens
        self.assertGreater(repeated_runs(plain_tokens, 3), 5)
        self.assertEqual(repeated_runs(dry_tokens, 3), 0, dry.choices[0].text)
        self.assertNotEqual(plain.choices[0].text, dry.choices[0].text)
        with self.assertRaises(openai.BadRequestError):  # ranked by the model's logprobs
            c.completions.create(model="", prompt=prompt, max_tokens=2, extra_body={
                "dry_multiplier": 1.0, "use_beam_search": True, "best_of": 2})
        with self.assertRaises(openai.BadRequestError):
            c.chat.completions.create(model="", messages=[{"role": "user", "content": "Hi"}],
                                      max_tokens=2, extra_body={"typical_p": 0})

    def test_a_list_of_prompts_gives_each_its_choices_in_order(self):
        c = client()
        prompts = ["The capital of France is", "Hello, my name is", "One, two, three,"]
        batch = c.completions.create(model="", prompt=prompts, max_tokens=4, n=2, temperature=0)
        self.assertEqual([ch.index for ch in batch.choices], list(range(6)))
        total_prompt = 0
        for i, p in enumerate(prompts):
            alone = c.completions.create(model="", prompt=p, max_tokens=4, temperature=0)
            self.assertEqual(batch.choices[2 * i].text, alone.choices[0].text)
            self.assertEqual(batch.choices[2 * i + 1].text, alone.choices[0].text)
            total_prompt += alone.usage.prompt_tokens
        self.assertEqual(batch.usage.prompt_tokens, total_prompt)
        self.assertEqual(batch.usage.completion_tokens, 6 * 4)
        # Token-id lists too; a list of prompts is not streamed.
        ids = c.completions.create(model="", prompt=[[1, 2, 3], [4, 5]], max_tokens=1,
                                   temperature=0)
        self.assertEqual(len(ids.choices), 2)
        for bad in (dict(prompt=prompts, stream=True), dict(prompt=[]),
                    dict(prompt=["a", 5])):
            with self.assertRaises(openai.BadRequestError):
                c.completions.create(model="", max_tokens=2, **bad)


class Chat(unittest.TestCase):
    messages = [{"role": "user", "content": "What is the capital of France?"}]

    def test_chat_stream_equals_whole(self):
        c = client()
        # ignore_eos: exactly 20 tokens whatever the greedy answer's own length (which moves
        # with the kernels' rounding).
        r = c.chat.completions.create(model="", messages=self.messages, max_tokens=20, temperature=0,
                                      extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 20)
        # The chat template (system prompt included) reached the model: 37 prompt tokens, as
        # the model's own template renders this conversation.
        self.assertEqual(r.usage.prompt_tokens, 37)
        stream = c.chat.completions.create(model="", messages=self.messages, max_tokens=20,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        chunks = list(stream)
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, r.choices[0].message.content)
        # llama-server's timings (the chat page shows them): on the whole response, and on the
        # stream's finishing chunk, which is the only one that has them.
        for timings in (r.model_extra["timings"], chunks[-1].model_extra["timings"]):
            self.assertEqual(timings["predicted_n"], 20)
            self.assertEqual(timings["prompt_n"] + timings["cache_n"], 37)
            self.assertGreater(timings["predicted_ms"], 0)
            self.assertAlmostEqual(timings["predicted_per_second"],
                                   19 * 1000 / timings["predicted_ms"], places=3)
            self.assertGreaterEqual(timings["ttft_ms"], timings["prompt_ms"])
        self.assertEqual(sum("timings" in (ch.model_extra or {}) for ch in chunks), 1)

    def test_chat_logprobs_and_max_completion_tokens(self):
        r = client().chat.completions.create(model="", messages=self.messages, temperature=0,
                                             max_completion_tokens=5, logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertEqual(r.usage.completion_tokens, 5)
        self.assertTrue(all(len(t.top_logprobs) == 2 for t in content))


class StructuredOutput(unittest.TestCase):
    schema = {"type": "object",
              "properties": {"city": {"type": "string", "maxLength": 30},
                             "population": {"type": "integer", "minimum": 0},
                             "tags": {"type": "array", "items": {"enum": ["big", "old", "port"]},
                                      "minItems": 1, "maxItems": 3}},
              "required": ["city", "population", "tags"]}
    messages = [{"role": "user", "content": "Describe Paris as JSON."}]

    def response_format(self, schema):
        return {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}

    def test_json_schema_output_validates_whole_and_streamed(self):
        c = client()
        for seed in range(3):
            r = c.chat.completions.create(model="", messages=self.messages, temperature=0.8,
                                          seed=seed, max_tokens=200,
                                          response_format=self.response_format(self.schema))
            self.assertEqual(r.choices[0].finish_reason, "stop")
            jsonschema.validate(json.loads(r.choices[0].message.content), self.schema)
            chunks = c.chat.completions.create(model="", messages=self.messages, temperature=0.8,
                                               seed=seed, max_tokens=200, stream=True,
                                               response_format=self.response_format(self.schema))
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            self.assertEqual(text, r.choices[0].message.content)
        # Computing and applying the masks are timed apart, per token.
        values, _ = server.metrics()
        for name in ["inferd:grammar_mask_microseconds", "inferd:grammar_apply_microseconds"]:
            self.assertGreater(values[name + "_count"], 0, name)
            self.assertGreater(values[name + "_sum"], 0, name)
            self.assertEqual(values[name + "_count"], values["inferd:grammar_mask_microseconds_count"])

    def test_choice_regex_and_json_object(self):
        c = client()
        r = c.completions.create(model="", prompt="The capital of France is", max_tokens=10,
                                 extra_body={"structured_outputs": {"choice": ["Rome", "Paris"]}})
        self.assertIn(r.choices[0].text, ["Rome", "Paris"])
        r = c.completions.create(model="", prompt="Year:", max_tokens=10, temperature=1.0,
                                 extra_body={"structured_outputs": {"regex": "[12][0-9]{3}"}})
        self.assertRegex(r.choices[0].text, r"^[12][0-9]{3}$")
        # Any object: its strings are unbounded, so a sampled answer may also run to max_tokens
        # (then it is an object cut short). Seeded, so a failure reproduces.
        complete = 0
        for seed in range(3):
            r = c.chat.completions.create(model="", messages=self.messages, max_tokens=300,
                                          seed=seed, response_format={"type": "json_object"})
            content = r.choices[0].message.content
            if r.choices[0].finish_reason == "stop":
                self.assertIsInstance(json.loads(content), dict)
                complete += 1
            else:
                self.assertEqual(r.choices[0].finish_reason, "length")
                self.assertTrue(content.startswith("{"), content)
        self.assertGreater(complete, 0)

    def test_unsupported_schema_is_a_400_naming_the_keyword(self):
        with self.assertRaises(openai.BadRequestError) as ctx:
            client().chat.completions.create(
                model="", messages=self.messages,
                response_format=self.response_format({"type": "array", "uniqueItems": True}))
        self.assertEqual(ctx.exception.body["param"], "response_format")
        self.assertIn("uniqueItems", ctx.exception.body["message"])

    def test_end_of_generation_token_has_a_logprob(self):
        r = client().completions.create(model="", prompt="x", max_tokens=10, logprobs=2,
                                        extra_body={"structured_outputs": {"choice": ["yes"]}})
        self.assertEqual(r.choices[0].text, "yes")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        lp = r.choices[0].logprobs
        # The tokens of "yes", then the end-of-generation token the grammar forced.
        self.assertEqual(len(lp.tokens), r.usage.completion_tokens + 1)
        self.assertTrue(all(v <= 0.0 for v in lp.token_logprobs))
        self.assertEqual(len(lp.top_logprobs[-1]), 2)


class Errors(unittest.TestCase):
    def assert_bad(self, param, **kw):
        with self.assertRaises(openai.BadRequestError) as ctx:
            client().completions.create(model="", prompt="hi", **kw)
        self.assertEqual(ctx.exception.body["param"], param, ctx.exception.body)
        self.assertEqual(ctx.exception.body["type"], "invalid_request_error")

    def test_values_out_of_range_name_the_parameter(self):
        self.assert_bad("temperature", temperature=3)
        self.assert_bad("top_p", top_p=0)
        self.assert_bad("max_tokens", max_tokens=0)
        self.assert_bad("n", n=100)
        self.assert_bad("logprobs", logprobs=50)
        self.assert_bad("presence_penalty", presence_penalty=5)
        self.assert_bad("logit_bias", logit_bias={"-3": 1})
        self.assert_bad("max_tokens", max_tokens=100000)

    def test_prefix_cache_reports_cached_tokens(self):
        c = client()
        prompt = ("A long preamble that several requests share, so that the second of them finds "
                  "its first blocks in the prefix cache and says so in its usage. ") * 3
        before, _ = server.metrics()
        first = c.completions.create(model="", prompt=prompt + "First:", max_tokens=2,
                                     temperature=0, extra_body={"cache_salt": "e2e-prefix"})
        second = c.completions.create(model="", prompt=prompt + "Second:", max_tokens=2,
                                      temperature=0, extra_body={"cache_salt": "e2e-prefix"})
        self.assertEqual(first.usage.prompt_tokens_details.cached_tokens, 0)
        cached = second.usage.prompt_tokens_details.cached_tokens
        self.assertGreater(cached, 32)
        self.assertLess(cached, second.usage.prompt_tokens)
        self.assertEqual(cached % 16, 0)  # whole blocks
        other = c.completions.create(model="", prompt=prompt + "Second:", max_tokens=2,
                                     temperature=0, extra_body={"cache_salt": "e2e-other"})
        self.assertEqual(other.usage.prompt_tokens_details.cached_tokens, 0)
        after, _ = server.metrics()
        self.assertGreaterEqual(after["vllm:prefix_cache_hits"] - before["vllm:prefix_cache_hits"],
                                cached)
        self.assertGreaterEqual(
            after["vllm:prefix_cache_queries"] - before["vllm:prefix_cache_queries"],
            first.usage.prompt_tokens + second.usage.prompt_tokens + other.usage.prompt_tokens)
        self.assert_bad("cache_salt", extra_body={"cache_salt": 5})
        self.assert_bad("cache_salt", extra_body={"cache_salt": ""})

    def test_wrong_types_name_the_parameter(self):
        self.assert_bad("temperature", extra_body={"temperature": "hot"})
        self.assert_bad("stop", extra_body={"stop": 5})
        self.assert_bad("seed", extra_body={"seed": 1.5})

    def test_prompt_longer_than_context(self):
        with self.assertRaises(openai.BadRequestError) as ctx:
            client().completions.create(model="", prompt="word " * 3000, max_tokens=4)
        self.assertEqual(ctx.exception.body["param"], "prompt")

    def test_bad_json_unknown_model_auth_and_body_size(self):
        status, body = server.post("/v1/completions", None, {"Authorization": f"Bearer {API_KEY}"},
                                   raw=b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("not valid JSON", body["error"]["message"])
        # Any model name is the one model served (llama-server); --strict-model-name refuses
        # the others (vLLM), naming what is served.
        r = client().completions.create(model="gpt-4o", prompt="hi", max_tokens=2)
        self.assertEqual(r.usage.completion_tokens, 2)
        # A small context: the run to its end below is short even under the sanitizers on a
        # loaded machine (at 512 it took over the harness's 60 s once).
        strict = Server(INFERD, MODEL, "-c", "128", "--max-seqs", "1", "--strict-model-name",
                        "--alias", "smol,smol-alias")
        try:
            status, body = strict.post("/v1/completions", {"model": "gpt-4o", "prompt": "hi", "max_tokens": 2})
            self.assertEqual(status, 404)
            self.assertIn("'smol'", body["error"]["message"])
            status, body = strict.post("/v1/completions", {"model": "smol-alias", "prompt": "hi", "max_tokens": 2})
            self.assertEqual(status, 200, body)
            with urllib.request.urlopen(strict.base + "/v1/models", timeout=10) as r:
                self.assertEqual([m["id"] for m in json.loads(r.read())["data"]], ["smol", "smol-alias"])
            # llama-server's API stops at the context's end rather than refusing a long
            # n_predict (the OpenAI API refuses, naming max_tokens).
            status, body = strict.post("/completion", {"prompt": "Count: 1, 2, 3,", "n_predict": 5000,
                                                       "ignore_eos": True})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["tokens_predicted"] + body["tokens_evaluated"], 128)
            status, body = strict.post("/v1/completions", {"prompt": "Hi", "max_tokens": 5000})
            self.assertEqual((status, body["error"]["param"]), (400, "max_tokens"))
        finally:
            strict.stop()
        with self.assertRaises(openai.AuthenticationError):
            client("wrong-key").completions.create(model="", prompt="hi", max_tokens=2)
        status, body = server.post("/v1/completions", None, {"Authorization": f"Bearer {API_KEY}"},
                                   raw=b'{"prompt": "' + b"a" * (2 << 20) + b'"}')
        self.assertEqual(status, 413)
        self.assertIn("larger than", body["error"]["message"])


class Endpoints(unittest.TestCase):
    def test_llama_server_routes_tokenize_form_and_cors(self):
        auth = {"Authorization": f"Bearer {API_KEY}"}
        # The OpenAI routes without /v1, as llama-server answers them.
        status, r = server.post("/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                      "max_tokens": 3}, auth)
        self.assertEqual(status, 200, r)
        self.assertEqual(r["object"], "chat.completion")
        status, r = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 3}, auth)
        self.assertEqual((status, r["object"]), (200, "text_completion"))
        self.assertEqual(client().with_options(base_url=server.base).models.list().data[0].id,
                         client().models.list().data[0].id)
        # llama-server's /tokenize: content, add_special (off by default), with_pieces.
        status, plain = server.post("/tokenize", {"content": "Hello world"}, auth)
        self.assertEqual(status, 200)
        status, vllm = server.post("/tokenize", {"prompt": "Hello world", "add_special_tokens": False}, auth)
        self.assertEqual(plain["tokens"], vllm["tokens"])
        status, pieces = server.post("/tokenize", {"content": "Hello world é", "with_pieces": True}, auth)
        self.assertEqual("".join(p["piece"] if isinstance(p["piece"], str) else bytes(p["piece"]).decode()
                                 for p in pieces["tokens"]), "Hello world é")
        status, bad = server.post("/tokenize", {"content": 5}, auth)
        self.assertEqual((status, bad["error"]["param"]), (400, "content"))
        # CORS: a preflight from this machine's pages is allowed, from elsewhere not (no
        # --cors-origins), and needs no key; the answer itself carries the origin too.
        def preflight(origin):
            req = urllib.request.Request(server.base + "/v1/chat/completions", method="OPTIONS", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.headers
        status, headers = preflight("http://localhost:5173")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Access-Control-Allow-Origin"], "http://localhost:5173")
        self.assertIn("POST", headers["Access-Control-Allow-Methods"])
        self.assertEqual(headers["Access-Control-Allow-Headers"], "authorization, content-type")
        for origin in ("http://evil.com", "http://localhost.evil.com", "null"):
            status, headers = preflight(origin)
            self.assertNotIn("Access-Control-Allow-Origin", headers, origin)
        req = urllib.request.Request(server.base + "/v1/models", headers={**auth, "Origin": "http://127.0.0.1:3000"})
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertEqual(r.headers["Access-Control-Allow-Origin"], "http://127.0.0.1:3000")
        req = urllib.request.Request(server.base + "/v1/models", headers={**auth, "Origin": "http://evil.com"})
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertNotIn("Access-Control-Allow-Origin", r.headers)

    def test_llama_server_native_completion(self):
        # POST /completion (and /completions without /v1): llama-server's request and answer.
        auth = {"Authorization": f"Bearer {API_KEY}"}
        status, r = server.post("/completion", {"prompt": "The capital of France is", "n_predict": 6,
                                                "temperature": 0, "return_tokens": True, "n_probs": 2}, auth)
        self.assertEqual(status, 200, r)
        whole = server.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6,
                                                "temperature": 0}, auth)[1]
        self.assertEqual(r["content"], whole["choices"][0]["text"])
        self.assertEqual((r["stop"], r["stop_type"], r["tokens_predicted"]), (True, "limit", 6))
        self.assertEqual(len(r["tokens"]), 6)
        self.assertEqual(r["timings"]["predicted_n"], 6)
        self.assertEqual(r["generation_settings"]["n_predict"], 6)
        probs = r["completion_probabilities"]
        self.assertEqual([p["id"] for p in probs], r["tokens"])
        self.assertTrue(all(len(p["top_logprobs"]) == 2 for p in probs))
        # A stop word ends it and is named; the stream's chunks carry their token ids and its
        # last object the totals.
        body = {"prompt": "The capital of France is", "n_predict": 20, "temperature": 0,
                "stop": [" Paris"], "stream": True}
        req = urllib.request.Request(server.base + "/completions", data=json.dumps(body).encode(),
                                     method="POST", headers={**auth, "Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(req, timeout=60) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        self.assertTrue(events[-1]["stop"])
        self.assertEqual((events[-1]["stop_type"], events[-1]["stopping_word"]), ("word", " Paris"))
        self.assertTrue(all(not e["stop"] and e["tokens"] for e in events[:-1]))
        # Prompts as token ids; n_predict 0 computes the prompt only.
        ids = server.post("/tokenize", {"content": "Hello"}, auth)[1]["tokens"]
        status, r = server.post("/completion", {"prompt": ids, "n_predict": 0}, auth)
        self.assertEqual((status, r["content"], r["tokens_predicted"], r["tokens_evaluated"]),
                         (200, "", 0, len(ids)))
        # A llama.cpp sampler inferd lacks is refused, not ignored (tfs_z: removed from
        # llama.cpp too); its own samplers are taken, out-of-range values refused.
        status, r = server.post("/completion", {"prompt": "Hi", "tfs_z": 0.9}, auth)
        self.assertEqual((status, r["error"]["param"]), (400, "tfs_z"))
        status, r = server.post("/completion", {"prompt": "Hi", "tfs_z": 1, "n_predict": 2}, auth)
        self.assertEqual(status, 200)
        status, r = server.post("/completion", {"prompt": "Hi", "mirostat": 3}, auth)
        self.assertEqual((status, r["error"]["param"]), (400, "mirostat"))
        status, r = server.post("/completion", {"prompt": "Hi", "dry_sequence_breakers": []}, auth)
        self.assertEqual((status, r["error"]["param"]), (400, "dry_sequence_breakers"))
        # A request's LoRA scales (llama-server's `lora`) on a server without adapters are refused,
        # not ignored (server_lora_test.py has a server with some).
        status, r = server.post("/completion", {"prompt": "Hi", "lora": [{"id": 0, "scale": 0.5}]},
                                auth)
        self.assertEqual((status, r["error"]["param"]), (400, "lora"))
        settings = {"mirostat": 2, "mirostat_tau": 4.0, "typical_p": 0.9, "dry_multiplier": 0.5,
                    "dry_sequence_breakers": ["\n"], "xtc_probability": 0.5}
        status, r = server.post("/completion", {"prompt": "Hi", "n_predict": 4, "seed": 1,
                                                **settings}, auth)
        self.assertEqual(status, 200)
        for key, value in settings.items():
            if isinstance(value, float):
                self.assertAlmostEqual(r["generation_settings"][key], value, 6, key)
            else:
                self.assertEqual(r["generation_settings"][key], value, key)
        status, r = server.post("/completion", {"prompt": "Hi", "n_probs": 21}, auth)
        self.assertEqual((status, r["error"]["param"]), (400, "n_probs"))
        # post_sampling_probs: the sampler's probabilities ("prob", "top_probs") after top_k 5:
        # at most 5 alternatives, which hold all the mass, and the chosen token among them.
        status, r = server.post("/completion", {"prompt": "Today I would finally become a",
                                                "n_predict": 4, "temperature": 1.0, "top_k": 5,
                                                "top_p": 1.0, "min_p": 0.0, "seed": 3,
                                                "n_probs": 10, "post_sampling_probs": True}, auth)
        self.assertEqual(status, 200, r)
        for tok in r["completion_probabilities"]:
            self.assertNotIn("logprob", tok)
            self.assertTrue(0.0 < tok["prob"] <= 1.0)
            top = tok["top_probs"]
            self.assertTrue(1 <= len(top) <= 5)
            self.assertAlmostEqual(sum(t["prob"] for t in top), 1.0, places=4)
            self.assertAlmostEqual(next(t["prob"] for t in top if t["id"] == tok["id"]), tok["prob"],
                                   places=6)
        # A list of prompts (ids, text): a list of answers in order; greedy, so the same text.
        status, tok = server.post("/tokenize", {"content": "The capital of France is"}, auth)
        status, r = server.post("/completion", {"prompt": [tok["tokens"], "The capital of France is"],
                                                "n_predict": 4, "temperature": 0}, auth)
        self.assertEqual(status, 200, r)
        self.assertEqual([a["index"] for a in r], [0, 1])
        self.assertEqual(r[0]["content"], r[1]["content"])
        # /infill needs FIM tokens, which SmolLM2's vocabulary does not have: 501, naming them
        # (the prompt layout is tested in tests/unit/server_infill_test.cpp).
        status, r = server.post("/infill", {"input_prefix": "def f():", "input_suffix": ""}, auth)
        self.assertEqual(status, 501, r)
        self.assertIn("fill-in-the-middle token for: prefix", r["error"]["message"])

    def test_llama_server_command_line(self):
        # llama-server's flags: -np splits -c, -n and --temp are request defaults, --alias
        # names the model, GPU and memory flags are accepted with a warning, --no-ui.
        llama = Server(INFERD, MODEL, "-np", "2", "-c", "1024", "-ngl", "99", "--mlock", "--jinja",
                       "--metrics", "-n", "5", "--temp", "0", "--alias", "tinyllama-2", "--no-ui",
                       "-fa", "on", "-ub", "512", "--cont-batching")
        try:
            with urllib.request.urlopen(llama.base + "/v1/models", timeout=10) as r:
                model = json.loads(r.read())["data"][0]
            self.assertEqual((model["id"], model["max_model_len"]), ("tinyllama-2", 512))
            with urllib.request.urlopen(llama.base + "/props", timeout=10) as r:
                props = json.loads(r.read())
            self.assertEqual((props["total_slots"], props["default_generation_settings"]["n_ctx"]), (2, 512))
            self.assertEqual(props["default_generation_settings"]["params"]["temperature"], 0)
            self.assertTrue(props["model_path"].endswith(".gguf"))
            texts = []
            for _ in range(2):
                status, r = llama.post("/v1/completions", {"prompt": "Once upon a time"})
                self.assertEqual((status, r["usage"]["completion_tokens"]), (200, 5), r)
                texts.append(r["choices"][0]["text"])
            self.assertEqual(texts[0], texts[1], "--temp 0 is the default: greedy")
            status, r = llama.post("/completion", {"prompt": "Once upon a time"})
            self.assertEqual(r["tokens_predicted"], 5)  # -n for llama-server's API too
            # ... unless the request gives its own n_predict, larger or smaller (as there).
            for n in (9, 3):
                status, r = llama.post("/completion", {"prompt": "Once upon a time", "n_predict": n,
                                                       "ignore_eos": True})
                self.assertEqual(r["tokens_predicted"], n)
            status, r = llama.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 7})
            self.assertEqual(r["usage"]["completion_tokens"], 7)
            with self.assertRaises(urllib.error.HTTPError):
                urllib.request.urlopen(llama.base + "/", timeout=10)
            # /slots is off without --slots (501), as in llama-server.
            with self.assertRaises(urllib.error.HTTPError) as off:
                urllib.request.urlopen(llama.base + "/slots", timeout=10)
            self.assertEqual(off.exception.code, 501)
        finally:
            llama.stop()
        # Two addresses (--host takes a list, llama-server's form), /slots on, /metrics off.
        two = Server(INFERD, MODEL, "-np", "2", "-c", "512", "--slots", "--no-metrics",
                     "--host", "127.0.0.1,127.0.0.2")  # Linux routes all of 127/8 to loopback
        try:
            with urllib.request.urlopen(two.base + "/slots", timeout=10) as r:
                slots = json.loads(r.read())
            self.assertEqual([(s["id"], s["n_ctx"], s["is_processing"]) for s in slots],
                             [(0, 256, False), (1, 256, False)])
            with self.assertRaises(urllib.error.HTTPError) as off:
                urllib.request.urlopen(two.base + "/metrics", timeout=10)
            self.assertEqual(off.exception.code, 501)
            with urllib.request.urlopen(f"http://127.0.0.2:{two.port}/health", timeout=10) as r:
                self.assertEqual(r.status, 200)
        finally:
            two.stop()
        log = "".join(llama.log)
        for flag in ("--gpu-layers", "--mlock", "--flash-attn", "--ubatch-size"):
            self.assertIn(f"warning: {flag} is accepted", log)
        self.assertNotIn("--jinja is accepted", log)
        # --api-key-file: the first line, without its line end (\r\n from Windows included).
        with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
            f.write("file-key\r\nsecond line\n")
        keyed = Server(INFERD, MODEL, "-c", "256", "--max-seqs", "1", "--api-key-file", f.name)
        try:
            for headers, code in (({"Authorization": "Bearer file-key"}, 200), ({}, 401)):
                req = urllib.request.Request(keyed.base + "/v1/models", headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        self.assertEqual(r.status, code)
                except urllib.error.HTTPError as e:
                    self.assertEqual(e.code, code)
        finally:
            keyed.stop()
            os.unlink(f.name)
        # A bad sampling flag stops the server at start, naming it.
        bad = subprocess.run([INFERD, "serve", "-m", MODEL, "--top-p", "0"], capture_output=True,
                             text=True, timeout=120)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("top_p", bad.stderr)

    def test_models_tokenize_detokenize_metrics(self):
        models = client().models.list()
        self.assertEqual(len(models.data), 1)
        auth = {"Authorization": f"Bearer {API_KEY}"}
        status, tok = server.post("/tokenize", {"prompt": "Hello world"}, auth)
        self.assertEqual(status, 200)
        self.assertEqual(tok["count"], len(tok["tokens"]))
        status, detok = server.post("/detokenize", {"tokens": tok["tokens"]}, auth)
        self.assertEqual(detok["prompt"], "Hello world")
        values, text = server.metrics()
        for name in ["vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_sum",
                     "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_sum",
                     "vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                     "vllm:generation_tokens_total"]:
            self.assertIn(name, values, name)
        self.assertIn('vllm:request_success_total{model_name=', text)

    def test_apply_template_is_what_chat_encodes(self):
        auth = {"Authorization": f"Bearer {API_KEY}"}
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        status, applied = server.post("/apply-template", {"messages": messages}, auth)
        self.assertEqual(status, 200, applied)
        self.assertIn("Be brief.", applied["prompt"])
        self.assertIn("Hi", applied["prompt"])
        # The chat request's prompt is that text, tokenized with the vocabulary's own BOS rule.
        status, via_text = server.post("/tokenize", {"prompt": applied["prompt"]}, auth)
        status, via_chat = server.post("/tokenize", {"messages": messages}, auth)
        self.assertEqual(via_text["tokens"], via_chat["tokens"])
        status, bad = server.post("/apply-template", {"messages": "Hi"}, auth)
        self.assertEqual(status, 400)
        self.assertEqual(bad["error"]["param"], "messages")


class ModelWithoutChatTemplate(unittest.TestCase):
    """A file without tokenizer.chat_template serves completions; chat gets a 400 that names
    the missing template, unless --chat-template gives one."""

    def test_serves_completions_and_refuses_chat(self):
        with tempfile.TemporaryDirectory() as tmp:
            bare = os.path.join(tmp, "no-template.gguf")
            shutil.copyfile(MODEL, bare)
            # Renaming the key in place (same length) keeps every offset of the file valid.
            with open(bare, "r+b") as f:
                data = f.read(16 << 20)
                at = data.find(b"tokenizer.chat_template")
                self.assertGreater(at, 0)
                f.seek(at)
                f.write(b"tokenizer.chat_templatX")
            bare_server = Server(INFERD, bare, "-c", "512")
            try:
                self.assertTrue(any("no chat template" in line for line in bare_server.log))
                status, done = bare_server.post("/v1/completions",
                                                {"prompt": "Hello", "max_tokens": 2})
                self.assertEqual(status, 200, done)
                status, err = bare_server.post(
                    "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
                self.assertEqual(status, 400)
                self.assertIn("no chat template", err["error"]["message"])
                self.assertEqual(err["error"]["code"], "no_chat_template")
            finally:
                bare_server.stop()
            named = Server(INFERD, bare, "-c", "512", "--chat-template", "chatml")
            try:
                status, chat = named.post("/v1/chat/completions",
                                          {"messages": [{"role": "user", "content": "Hi"}],
                                           "max_tokens": 2})
                self.assertEqual(status, 200, chat)
            finally:
                named.stop()


class Reasoning(unittest.TestCase):
    """A thinking model's template (Qwen3, from llama.cpp's collection) makes the server split
    answers; the output is forced by a regex, and comes back split, whole and streamed."""

    def test_think_block_goes_to_reasoning_content(self):
        src = os.environ.get("INFERD_LLAMA_SRC", "")
        template = os.path.join(src, "models", "templates", "Qwen-Qwen3-0.6B.jinja")
        if not os.path.isfile(template):
            self.skipTest("no llama.cpp sources (INFERD_LLAMA_SRC)")
        thinking = Server(INFERD, MODEL, "-c", "1024", "--max-seqs", "2", "--chat-template", template)
        try:
            messages = [{"role": "user", "content": "Hi"}]
            status, rendered = thinking.post("/apply-template", {"messages": messages})
            self.assertEqual(status, 200, rendered)
            self.assertTrue(rendered["prompt"].endswith("<|im_start|>assistant\n"), rendered["prompt"])
            body = {"messages": messages, "max_tokens": 40,
                    "structured_outputs": {"regex": "<think>\nThe user greets me\\.\n</think>\n\nHello!"}}
            status, r = thinking.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, r)
            message = r["choices"][0]["message"]
            self.assertEqual(message["reasoning_content"], "\nThe user greets me.\n")
            self.assertEqual(message["content"], "Hello!")
            events = thinking.post_stream("/v1/chat/completions", dict(body, stream=True))
            deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
            self.assertEqual("".join(d.get("reasoning_content") or "" for d in deltas),
                             "\nThe user greets me.\n")
            # (The first delta names the role with content null.)
            self.assertEqual("".join(d.get("content") or "" for d in deltas), "Hello!")
        finally:
            thinking.stop()
        # The SmolLM2 template has no <think>: nothing is split.
        r = client().chat.completions.create(
            model="", messages=[{"role": "user", "content": "Hi"}], max_tokens=20,
            extra_body={"structured_outputs": {"regex": "<think>a</think>b"}})
        self.assertEqual(r.choices[0].message.content, "<think>a</think>b")


class Tools(unittest.TestCase):
    """Function calling with the official client, on Qwen2.5's chat template (Hermes-style
    <tool_call> tags; from llama.cpp's collection): the grammar forces the call, the server
    parses it back into tool_calls, whole and streamed, and the tool's result continues the
    conversation."""
    weather = WEATHER_TOOL
    clock = CLOCK_TOOL

    @classmethod
    def setUpClass(cls):
        src = os.environ.get("INFERD_LLAMA_SRC", "")
        template = os.path.join(src, "models", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
        if not os.path.isfile(template):
            raise unittest.SkipTest("no llama.cpp sources (INFERD_LLAMA_SRC)")
        cls.server = Server(INFERD, MODEL, "-c", "2048", "--max-seqs", "2", "--chat-template", template)
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key="x", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    messages = [{"role": "user", "content": "What is the weather in Paris?"}]

    def test_required_and_named_calls_whole_and_streamed(self):
        r = self.client.chat.completions.create(model="", messages=self.messages, max_tokens=100,
                                                tools=[self.weather, self.clock], tool_choice="required")
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        calls = r.choices[0].message.tool_calls
        self.assertGreaterEqual(len(calls), 1)
        for call in calls:
            self.assertIn(call.function.name, ["get_weather", "get_time"])
            self.assertIsInstance(json.loads(call.function.arguments), dict)
        named = {"type": "function", "function": {"name": "get_weather"}}
        stream = self.client.chat.completions.create(model="", messages=self.messages, max_tokens=100,
                                                     tools=[self.weather, self.clock],
                                                     tool_choice=named, stream=True)
        by_index, finish = {}, None
        for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    entry = by_index.setdefault(call.index, {"name": "", "arguments": "", "id": None})
                    entry["id"] = entry["id"] or call.id
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
                finish = choice.finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(list(by_index), [0])
        self.assertEqual(by_index[0]["name"], "get_weather")
        args = json.loads(by_index[0]["arguments"])
        self.assertIn(args["unit"], ["C", "F"])
        self.assertTrue(by_index[0]["id"])

    def test_tool_result_continues_the_conversation(self):
        named = {"type": "function", "function": {"name": "get_weather"}}
        r = self.client.chat.completions.create(model="", messages=self.messages, max_tokens=100,
                                                tools=[self.weather], tool_choice=named)
        call = r.choices[0].message.tool_calls[0]
        history = self.messages + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call.id, "type": "function",
                             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
        status, rendered = self.server.post("/apply-template", {"messages": history, "tools": [self.weather]})
        self.assertEqual(status, 200, rendered)
        self.assertIn("<tool_response>\nSunny, 21 C\n</tool_response>", rendered["prompt"])
        self.assertIn('"name": "get_weather"', rendered["prompt"])
        answer = self.client.chat.completions.create(model="", messages=history, max_tokens=30,
                                                     tools=[self.weather], temperature=0)
        self.assertIn(answer.choices[0].finish_reason, ["stop", "length", "tool_calls"])
        message = answer.choices[0].message
        self.assertTrue(message.content or message.tool_calls)


class SpeculativeDecoding(unittest.TestCase):
    PROMPT = ("Copy this list exactly: apple, river, stone, cloud, lamp, garden, bridge, violin.\n"
              "Copy: apple, river, stone,")

    def test_ngram_drafts_keep_the_text_and_are_counted(self):
        plain = client().completions.create(model="", prompt=self.PROMPT, max_tokens=24, temperature=0)
        spec = Server(INFERD, MODEL, "-c", "1024", "--max-seqs", "2", "--spec", "ngram",
                      "--spec-k", "4")
        try:
            status, r = spec.post("/v1/completions",
                                  {"prompt": self.PROMPT, "max_tokens": 24, "temperature": 0})
            self.assertEqual(status, 200, r)
            self.assertEqual(r["choices"][0]["text"], plain.choices[0].text)
            values, text = spec.metrics()
            self.assertGreater(values["vllm:spec_decode_num_draft_tokens"], 0)
            self.assertGreater(values["vllm:spec_decode_num_drafts"], 0)
            self.assertIn("vllm:spec_decode_num_accepted_tokens", values)
            self.assertIn('vllm:spec_decode_num_accepted_tokens_per_pos{model_name=', text)
            self.assertIn('position="3"', text)
            # Per request: off is allowed, more than the server's --spec-k is a 400 naming it.
            status, r = spec.post("/v1/completions", {"prompt": self.PROMPT, "max_tokens": 4,
                                                      "speculative.n_max": 0})
            self.assertEqual(status, 200, r)
            status, err = spec.post("/v1/completions", {"prompt": self.PROMPT, "max_tokens": 4,
                                                        "speculative.n_max": 9})
            self.assertEqual(status, 400)
            self.assertIn("speculative.n_max", err["error"]["message"])
        finally:
            spec.stop()
        # The main server runs without speculation: no counters, and n_max > 0 is refused.
        values, _ = server.metrics()
        self.assertNotIn("vllm:spec_decode_num_drafts", values)
        with self.assertRaises(openai.BadRequestError):
            client().completions.create(model="", prompt="Hi", max_tokens=2,
                                        extra_body={"speculative.n_max": 2})


if __name__ == "__main__":
    server = Server(INFERD, MODEL, "-c", "2048", "--max-seqs", "4", "--api-key", API_KEY,
                    "--max-body-bytes", str(1 << 20))
    try:
        result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    finally:
        code = server.stop()
    if not result.wasSuccessful():
        sys.stderr.write("".join(server.log[-20:]))
        sys.exit(1)
    sys.exit(0 if code in (0, -15) else f"server exit code {code}")
