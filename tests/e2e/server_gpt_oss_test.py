"""gpt-oss chat through the official openai client: a random-weight gpt-oss model (the golden
tests' shape, tests/golden/architectures/make-golden) with a small byte-level vocabulary that
has the harmony frame tokens of o200k_harmony, and gpt-oss's own chat template from llama.cpp's
collection in the file. The analysis channel comes back as reasoning_content, a forced tool call
as tool_calls (whole and streamed alike), and a tool's result goes back into the prompt in the
template's commentary frame. (The template's rendering against jinja2 is the chat_templates
test's; random weights write no meaningful words, so the channels are forced by a grammar.)"""
import json
import os
import shutil
import sys
import tempfile
import unittest

import openai

from server_harness import CLOCK_TOOL, WEATHER_TOOL, Server, import_gguf, make_golden, stream_chat

if len(sys.argv) < 2:
    sys.exit("usage: server_gpt_oss_test.py INFERD_BINARY")
INFERD = sys.argv[1]
TEMPLATE_FILE = "models/templates/openai-gpt-oss-120b.jinja"
gguf, SRC = import_gguf(TEMPLATE_FILE)
TEMPLATE = os.path.join(SRC, TEMPLATE_FILE)

# o200k_harmony's special tokens, with their ids' order; <|return|> ends an answer, <|call|> a
# tool call (the tokenizer makes both end the turn, and keeps the frame tokens as text).
HARMONY = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
           "<|start|>", "<|end|>", "<|message|>", "<|call|>"]


def byte_level_alphabet():
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE's token text)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_vocab(path):
    """A vocabulary-only GGUF: the 256 bytes, a few merges of English, the harmony tokens, and
    gpt-oss's chat template."""
    tokens = byte_level_alphabet()
    merges = []
    for pair in ["Ġ t", "h e", "Ġ a", "i n", "e r", "o n", "Ġt he", "r e", "a t", "e n", "Ġ w", "o r"]:
        left, right = pair.split(" ")
        merges.append(pair)
        tokens.append(left + right)
    normal = len(tokens)
    tokens += HARMONY
    w = gguf.GGUFWriter(path, "gpt-oss")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * normal + [gguf.TokenType.CONTROL] * len(HARMONY))
    w.add_token_merges(merges)
    w.add_bos_token_id(normal + HARMONY.index("<|startoftext|>"))
    w.add_eos_token_id(normal + HARMONY.index("<|return|>"))
    w.add_pad_token_id(normal + HARMONY.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    with open(TEMPLATE) as f:
        w.add_chat_template(f.read())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def write_model(directory):
    """make-golden's gpt-oss (F16, random weights) with the vocabulary above."""
    golden = make_golden()
    vocab = os.path.join(directory, "harmony-vocab.gguf")
    write_vocab(vocab)
    golden.VOCAB_FILES["harmony-test"] = vocab  # an absolute path: os.path.join keeps it
    model = dict(golden.MODELS["gpt-oss"], vocab="harmony-test")
    path = os.path.join(directory, "gpt-oss-tiny.F16.gguf")
    golden.make_f16("gpt-oss", model, path, gguf, 7)
    return path


WEATHER, CLOCK = WEATHER_TOOL, CLOCK_TOOL
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class GptOssChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="inferd-gpt-oss-")
        model = write_model(cls.dir)
        cls.server = Server(INFERD, model, "-c", "2048", "--max-seqs", "2")
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key="x", max_retries=0,
                                   timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def stream(self, **kw):
        return stream_chat(self.client, **kw)

    def test_prompt_is_the_harmony_frame(self):
        status, rendered = self.server.post("/apply-template", {"messages": ASK, "tools": [WEATHER]})
        self.assertEqual(status, 200, rendered)
        prompt = rendered["prompt"]
        self.assertTrue(prompt.startswith("<|start|>system<|message|>"), prompt)
        self.assertIn("namespace functions", prompt)
        self.assertIn("type get_weather = ", prompt)
        self.assertTrue(prompt.endswith("<|start|>user<|message|>What is the weather in Paris?<|end|>"
                                        "<|start|>assistant"), prompt)

    def test_analysis_channel_is_reasoning_content(self):
        answer = ("<\\|channel\\|>analysis<\\|message\\|>The user asks about Paris\\.<\\|end\\|>"
                  "<\\|start\\|>assistant<\\|channel\\|>final<\\|message\\|>It is sunny\\.")
        kw = dict(messages=ASK, max_tokens=300, temperature=0,
                  extra_body={"structured_outputs": {"regex": answer}})
        r = self.client.chat.completions.create(model="", **kw)
        message = r.choices[0].message
        self.assertEqual(getattr(message, "reasoning_content", None), "The user asks about Paris.")
        self.assertEqual(message.content, "It is sunny.")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        reasoning, content, calls, finish = self.stream(**kw)
        self.assertEqual((reasoning, content, calls, finish),
                         ("The user asks about Paris.", "It is sunny.", {}, "stop"))

    def test_forced_call_is_tool_calls_whole_and_streamed(self):
        for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
            # The forced-call grammar lets the model reason first, and random weights may
            # reason without end: a bias for "c" takes the commentary channel at once (and
            # fills the city with c's), the same on every machine.
            kw = dict(messages=ASK, max_tokens=300, temperature=0, tools=[WEATHER, CLOCK],
                      tool_choice=choice, logit_bias={str(ord("c")): 100})
            r = self.client.chat.completions.create(model="", **kw)
            self.assertEqual(r.choices[0].finish_reason, "tool_calls", r)
            calls = r.choices[0].message.tool_calls
            self.assertEqual(len(calls), 1, r)
            self.assertFalse(r.choices[0].message.content)
            call = calls[0]
            allowed = ["get_weather"] if isinstance(choice, dict) else ["get_weather", "get_time"]
            self.assertIn(call.function.name, allowed)
            args = json.loads(call.function.arguments)
            if call.function.name == "get_weather":
                self.assertIn(args["unit"], ["C", "F"])
                self.assertLessEqual(len(args["city"]), 20)
            # Streamed: the same call, and the same reasoning if the model wrote any first.
            reasoning, content, streamed, finish = self.stream(**kw)
            self.assertEqual(finish, "tool_calls")
            self.assertEqual(content, "")
            self.assertEqual(list(streamed), [0])
            self.assertEqual(streamed[0]["name"], call.function.name)
            self.assertEqual(json.loads(streamed[0]["arguments"]), args)
            self.assertTrue(streamed[0]["id"])
            self.assertEqual(reasoning, getattr(r.choices[0].message, "reasoning_content", None) or "")

    def test_tool_result_goes_back_in_the_commentary_frame(self):
        named = {"type": "function", "function": {"name": "get_weather"}}
        r = self.client.chat.completions.create(model="", messages=ASK, max_tokens=300, temperature=0,
                                                tools=[WEATHER], tool_choice=named,
                                                logit_bias={str(ord("c")): 100})
        call = r.choices[0].message.tool_calls[0]
        history = ASK + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call.id, "type": "function",
                             "function": {"name": call.function.name,
                                          "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
        status, rendered = self.server.post("/apply-template", {"messages": history, "tools": [WEATHER]})
        self.assertEqual(status, 200, rendered)
        prompt = rendered["prompt"]
        self.assertIn("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>",
                      prompt)
        self.assertIn('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>'
                      '"Sunny, 21 C"<|end|>', prompt)
        answer = self.client.chat.completions.create(model="", messages=history, max_tokens=30,
                                                     tools=[WEATHER], temperature=0)
        self.assertIn(answer.choices[0].finish_reason, ["stop", "length", "tool_calls"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
