"""Gemma 4 chat through the official openai client: make-golden's random-weight gemma4 model
(per-layer embeddings, shared KV, the Gemma 4 vocabulary) served with Gemma 4's own chat
template from llama.cpp's collection. The prompt is the template's (tools declared in its
syntax), the thought channel comes back as reasoning_content, and a call in Gemma 4's syntax
(<|tool_call>call:NAME{key:<|"|>text<|"|>,...}<tool_call|>) as tool_calls with JSON
arguments, whole and streamed alike; a tool's result goes back into the prompt. Random weights
write no words, so the answers are forced by a regex; the forced-call grammar is the unit tests'
(server_tools_test), its rendering against jinja2 the chat_templates test's."""
import json
import os
import shutil
import sys
import tempfile
import unittest

import openai

from server_harness import WEATHER_TOOL, Server, import_gguf, make_golden, stream_chat

if len(sys.argv) < 2:
    sys.exit("usage: server_gemma4_test.py INFERD_BINARY")
INFERD = sys.argv[1]
TEMPLATE_FILE = "models/templates/google-gemma-4-31B-it.jinja"
gguf, SRC = import_gguf(TEMPLATE_FILE)
TEMPLATE = os.path.join(SRC, TEMPLATE_FILE)

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
Q = '<\\|"\\|>'  # Gemma 4's string mark, as a regex


def write_model(directory):
    """make-golden's gemma4 model (F16, random weights, the Gemma 4 vocabulary)."""
    golden = make_golden()
    path = os.path.join(directory, "gemma4-tiny.F16.gguf")
    golden.make_f16("gemma4", golden.MODELS["gemma4"], path, gguf, 7)
    return path


class Gemma4Chat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="inferd-gemma4-")
        model = write_model(cls.dir)
        cls.server = Server(INFERD, model, "-c", "2048", "--max-seqs", "2",
                            "--chat-template-file", TEMPLATE)
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key="x", max_retries=0,
                                   timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def stream(self, **kw):
        return stream_chat(self.client, **kw)

    def test_prompt_is_the_gemma4_turns_with_tools_declared(self):
        status, rendered = self.server.post("/apply-template", {"messages": ASK, "tools": [WEATHER_TOOL]})
        self.assertEqual(status, 200, rendered)
        prompt = rendered["prompt"]
        self.assertIn("<|tool>declaration:get_weather{", prompt)
        self.assertIn("<|turn>user\nWhat is the weather in Paris?<turn|>", prompt)
        # Thinking on (llama-server's default): the system turn asks for it, the model opens it.
        self.assertIn("<|think|>", prompt)
        self.assertTrue(prompt.endswith("<|turn>model\n"), prompt)

    def test_thought_channel_is_reasoning_content(self):
        answer = "<\\|channel>thought\nThe user asks about Paris\\.<channel\\|>It is sunny\\."
        kw = dict(messages=ASK, max_tokens=100, temperature=0,
                  extra_body={"structured_outputs": {"regex": answer}})
        r = self.client.chat.completions.create(model="", **kw)
        message = r.choices[0].message
        self.assertEqual(getattr(message, "reasoning_content", None), "The user asks about Paris.")
        self.assertEqual(message.content, "It is sunny.")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(self.stream(**kw), ("The user asks about Paris.", "It is sunny.", {}, "stop"))

    def test_call_in_gemma4_syntax_is_tool_calls_whole_and_streamed(self):
        answer = ("<\\|tool_call>call:get_weather\\{city:" + Q + "Paris, France" + Q + ",unit:" + Q +
                  "C" + Q + "\\}<tool_call\\|>")
        kw = dict(messages=ASK, max_tokens=100, temperature=0, tools=[WEATHER_TOOL],
                  extra_body={"structured_outputs": {"regex": answer}})
        r = self.client.chat.completions.create(model="", **kw)
        self.assertEqual(r.choices[0].finish_reason, "tool_calls", r)
        calls = r.choices[0].message.tool_calls
        self.assertEqual(len(calls), 1, r)
        self.assertFalse(r.choices[0].message.content)
        self.assertEqual(calls[0].function.name, "get_weather")
        args = {"city": "Paris, France", "unit": "C"}
        self.assertEqual(json.loads(calls[0].function.arguments), args)
        reasoning, content, streamed, finish = self.stream(**kw)
        self.assertEqual((reasoning, content, finish), ("", "", "tool_calls"))
        self.assertEqual(list(streamed), [0])
        self.assertEqual(streamed[0]["name"], "get_weather")
        self.assertEqual(json.loads(streamed[0]["arguments"]), args)
        self.assertTrue(streamed[0]["id"])

        # The result goes back as the template's tool response.
        history = ASK + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": calls[0].id, "type": "function",
                             "function": {"name": "get_weather",
                                          "arguments": calls[0].function.arguments}}]},
            {"role": "tool", "tool_call_id": calls[0].id, "content": "Sunny, 21 C"}]
        status, rendered = self.server.post("/apply-template", {"messages": history, "tools": [WEATHER_TOOL]})
        self.assertEqual(status, 200, rendered)
        prompt = rendered["prompt"]
        self.assertIn("<|tool_call>call:get_weather{city:<|\"|>Paris, France<|\"|>,unit:<|\"|>C<|\"|>}"
                      "<tool_call|>", prompt)
        self.assertIn("<|tool_response>response:get_weather", prompt)
        self.assertIn("Sunny, 21 C", prompt)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
