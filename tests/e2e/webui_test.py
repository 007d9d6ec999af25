"""The chat page of `inferd serve`, driven in a real browser (Debian's chromium and
chromium-driver, through Selenium): load it, send a message with the keyboard, watch the answer
stream in, stop a long answer (the server's running requests drop to 0), reload and find the
conversation, regenerate, edit and resend, the settings, the API key prompt and the error shown
when the server is gone. Screenshots go to INFERD_SCREENSHOT_DIR when it is set (docs/webui/
holds the committed ones).

Skips (77) with a message when chromium, chromedriver or selenium is missing: scripts/setup
installs all three."""
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from server_harness import Server, args

INFERD, MODEL = args()

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    webdriver = None
if webdriver is None or not CHROMIUM or not CHROMEDRIVER:
    missing = [name for name, found in (("selenium (pip)", webdriver), ("chromium", CHROMIUM),
                                        ("chromedriver (chromium-driver)", CHROMEDRIVER)) if not found]
    print(f"SKIP: the browser test needs {', '.join(missing)}; scripts/setup installs them")
    sys.exit(77)

SHOTS = os.environ.get("INFERD_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="inferd-webui-")
API_KEY = "page-key"


def browser(width=1200, height=900):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


def wait_for(condition, timeout=60, step=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def running_requests(server):
    values, _ = server.metrics()
    return values.get("vllm:num_requests_running")


class ChatPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(INFERD, MODEL, "-c", "4096", "--max-seqs", "2")
        with urllib.request.urlopen(cls.server.base + "/v1/models", timeout=10) as r:
            cls.model_id = json.loads(r.read())["data"][0]["id"]
        cls.driver = browser()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.stop()

    # Helpers over the page's stable ids and classes.
    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def streaming(self):
        return self.driver.execute_script("return document.body.dataset.streaming") == "true"

    def open_page(self):
        self.driver.get(self.server.base + "/")
        wait_for(lambda: self.model_id in self.find("#model-name").text, what="the model name")

    def set_setting(self, css, value):
        toggle = self.find("#settings-toggle")
        if self.find("#settings").get_attribute("hidden") is not None:
            toggle.click()
        field = self.find(css)
        field.send_keys(Keys.CONTROL, "a")  # select what is there, type over it
        field.send_keys(str(value))
        field.send_keys(Keys.TAB)  # commit a change event
        self.assertEqual(float(field.get_attribute("value")), float(value), css)

    def type_and_send(self, text):
        prompt = self.find("#prompt")
        prompt.clear()
        prompt.send_keys(text)
        prompt.send_keys(Keys.ENTER)

    def last_answer(self):
        answers = self.all(".message.assistant .content")
        return answers[-1].text if answers else ""

    def stored(self):
        return json.loads(self.driver.execute_script(
            "return localStorage.getItem('inferd.conversations') || 'null'") or "null")

    def test_1_streams_an_answer_token_by_token(self):
        self.open_page()
        self.driver.execute_script("localStorage.clear()")  # a first visit
        self.open_page()
        self.set_setting("#temperature", 0)
        self.set_setting("#max-tokens", 160)
        self.find("#settings-toggle").click()
        # Shift+Enter is a newline, not a send.
        prompt = self.find("#prompt")
        prompt.clear()
        prompt.send_keys("Write a Python function that adds two numbers.")
        prompt.send_keys(Keys.SHIFT, Keys.ENTER)
        prompt.send_keys("Put it in a code block.")
        self.assertEqual(len(self.all(".message.user")), 0, "Shift+Enter must not send")
        self.assertIn("\n", prompt.get_attribute("value"))
        # Token by token: the page itself records each length the answer's text takes while
        # it streams (polling from here is too slow for a 135M model), which must be many, and
        # growing, not one block at the end.
        self.driver.execute_script("""
            window.seenLengths = [];
            new MutationObserver(() => {
              if (document.body.dataset.streaming !== "true") return;
              const answers = document.querySelectorAll(".message.assistant .content");
              const n = answers.length ? answers[answers.length - 1].textContent.length : 0;
              if (n && n !== window.seenLengths[window.seenLengths.length - 1])
                window.seenLengths.push(n);
            }).observe(document.getElementById("messages"),
                       {subtree: true, childList: true, characterData: true});""")
        prompt.send_keys(Keys.ENTER)
        wait_for(self.streaming, what="streaming to start")
        wait_for(lambda: not self.streaming(), what="the end of the answer")
        lengths = self.driver.execute_script("return window.seenLengths")
        self.assertGreaterEqual(len(set(lengths)), 5, f"answer lengths seen while streaming: {lengths}")
        # Rendered text can shrink by a few characters when markdown closes (`**` becomes bold),
        # but it grows over the stream.
        self.assertGreaterEqual(lengths[-1], 0.9 * max(lengths), lengths)
        self.assertLess(lengths[0], lengths[-1] / 2, lengths)
        self.assertTrue(self.last_answer().strip())
        stats = self.all(".message.assistant .stats")[-1].text
        self.assertIn("tok/s", stats)
        self.assertIn("TTFT", stats)
        self.assertEqual(len(self.all(".message.user")), 1)
        # Markdown: a fence in the raw answer is a code block with a copy button on the page.
        raw = self.stored()
        self.assertTrue(raw, "the conversation is kept in localStorage")
        if "```" in json.dumps(raw):
            self.assertTrue(self.all(".message.assistant pre code"))
            self.assertTrue(self.all(".message.assistant .copy"))
        self.driver.save_screenshot(os.path.join(SHOTS, "chat-code-block.png"))

    def test_2_settings_panel(self):
        self.find("#settings-toggle").click()
        self.assertIsNone(self.find("#settings").get_attribute("hidden"))
        for css in ("#system-prompt", "#temperature", "#top-p", "#max-tokens"):
            self.assertTrue(self.find(css).is_displayed(), css)
        self.driver.save_screenshot(os.path.join(SHOTS, "settings.png"))
        # Kept across a reload.
        self.set_setting("#top-p", 0.9)
        self.driver.refresh()
        wait_for(lambda: self.model_id in self.find("#model-name").text, what="the model name")
        self.find("#settings-toggle").click()
        self.assertAlmostEqual(float(self.find("#top-p").get_attribute("value")), 0.9)
        self.find("#settings-toggle").click()

    def test_3_stop_cancels_the_request_on_the_server(self):
        self.set_setting("#max-tokens", 3000)
        self.find("#settings-toggle").click()
        before = len(self.all(".message.assistant"))
        self.type_and_send("Count from 1 to 1000, one number per line.")
        wait_for(lambda: len(self.last_answer()) > 40 and self.streaming(), what="a long answer")
        self.assertEqual(running_requests(self.server), 1)
        self.find("#prompt").send_keys(Keys.ESCAPE)  # Esc stops, as the stop button does
        wait_for(lambda: not self.streaming(), timeout=10, what="the page to stop streaming")
        stopped_at = len(self.last_answer())
        wait_for(lambda: running_requests(self.server) == 0, timeout=10,
                 what="the server's running requests to drop to 0")
        time.sleep(0.5)
        self.assertEqual(len(self.last_answer()), stopped_at, "no text after the stop")
        self.assertEqual(len(self.all(".message.assistant")), before + 1)
        values, _ = self.server.metrics()
        self.assertEqual(values.get("vllm:num_requests_running"), 0)

    def test_4_reload_finds_the_conversation(self):
        users = [e.text for e in self.all(".message.user .content")]
        answers = [e.text for e in self.all(".message.assistant .content")]
        self.driver.refresh()
        wait_for(lambda: self.model_id in self.find("#model-name").text, what="the model name")
        wait_for(lambda: len(self.all(".message.user")) == len(users), what="the messages back")
        self.assertEqual([e.text for e in self.all(".message.user .content")], users)
        self.assertEqual([e.text for e in self.all(".message.assistant .content")], answers)
        self.assertGreaterEqual(len(self.all("#conversations li")), 1)

    def test_5_regenerate_and_edit(self):
        self.set_setting("#max-tokens", 24)
        self.find("#settings-toggle").click()
        n_users = len(self.all(".message.user"))
        n_answers = len(self.all(".message.assistant"))
        self.all(".message.assistant .regenerate")[-1].click()
        wait_for(lambda: not self.streaming() and self.last_answer(), what="the regenerated answer")
        wait_for(lambda: not self.streaming(), what="the end of the answer")
        self.assertEqual(len(self.all(".message.assistant")), n_answers)
        self.assertEqual(len(self.all(".message.user")), n_users)
        # Edit the first message: what followed it goes, a new answer comes.
        self.all(".message.user .edit")[0].click()
        editor = wait_for(lambda: self.all(".message.user textarea"), what="the editor")[0]
        editor.clear()
        editor.send_keys("Say hello.")
        save = [b for b in self.all(".message.user button") if b.text.strip().lower() == "save"]
        self.assertTrue(save, "a Save button in the editor")
        save[0].click()
        wait_for(self.streaming, timeout=10, what="the resent message to stream")
        wait_for(lambda: not self.streaming(), what="the end of the answer")
        self.assertEqual([e.text for e in self.all(".message.user .content")], ["Say hello."])
        self.assertEqual(len(self.all(".message.assistant")), 1)

    def test_6_new_chat(self):
        before = len(self.all("#conversations li"))
        self.find("#new-chat").click()
        self.assertEqual(len(self.all(".message")), 0)
        self.type_and_send("Hi!")
        wait_for(lambda: not self.streaming() and self.last_answer(), what="an answer")
        self.assertEqual(len(self.all("#conversations li")), before + 1)

    def test_7_reasoning_is_folded_above_the_answer(self):
        # SmolLM2 does not think: the page's fetch of the completion is answered in the page by
        # a stream of the server's shape with reasoning_content deltas (as a thinking model's
        # answer comes, tests/e2e/server_openai_test.py), everything else stays real.
        self.driver.execute_script("""
            const realFetch = window.fetch;
            window.fetch = (url, init) => {
              if (!String(url).endsWith("/v1/chat/completions")) return realFetch(url, init);
              const deltas = [{role: "assistant", content: ""}, {reasoning_content: "The user "},
                              {reasoning_content: "greets me."}, {content: "Hello "},
                              {content: "**there**!"}];
              const events = deltas.map((d) => ({choices: [{index: 0, delta: d, finish_reason: null}]}));
              events.push({choices: [], usage: {prompt_tokens: 9, completion_tokens: 6},
                           timings: {ttft_ms: 12, prompt_ms: 10, predicted_n: 6,
                                     predicted_ms: 50, predicted_per_second: 100}});
              const text = events.map((e) => "data: " + JSON.stringify(e) + "\\n\\n").join("")
                           + "data: [DONE]\\n\\n";
              return Promise.resolve(new Response(text, {status: 200,
                  headers: {"Content-Type": "text/event-stream"}}));
            };""")
        self.type_and_send("Hi, think first.")
        wait_for(lambda: not self.streaming() and self.all(".message.assistant details.reasoning"),
                 what="the reasoning")
        details = self.all(".message.assistant details.reasoning")[-1]
        self.assertIsNone(details.get_attribute("open"), "reasoning is folded")
        self.assertIn("The user greets me.", details.get_attribute("textContent"))
        self.assertEqual(self.all(".message.assistant .content strong")[-1].text, "there")
        self.assertNotIn("greets", self.last_answer())
        self.assertIn("TTFT 12 ms", self.all(".message.assistant .stats")[-1].text)


class KeyAndErrors(unittest.TestCase):
    def test_api_key_prompt_then_error_when_the_server_is_gone(self):
        server = Server(INFERD, MODEL, "-c", "1024", "--max-seqs", "1", "--api-key", API_KEY)
        driver = browser(420, 800)  # a narrow window, as on a phone
        try:
            driver.get(server.base + "/")
            form = wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#api-key-form")
                            .get_attribute("hidden") is None, what="the API key form")
            self.assertTrue(form)
            driver.find_element(By.CSS_SELECTOR, "#api-key").send_keys(API_KEY, Keys.ENTER)
            wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#model-name").text.strip(),
                     what="the model name after the key")
            self.assertEqual(driver.execute_script("return document.documentElement.scrollWidth "
                                                   "<= window.innerWidth + 1"), True,
                             "no horizontal scrolling in a narrow window")
            server.stop()
            prompt = driver.find_element(By.CSS_SELECTOR, "#prompt")
            prompt.send_keys("Are you there?", Keys.ENTER)
            error = driver.find_element(By.CSS_SELECTOR, "#error")
            wait_for(lambda: error.get_attribute("hidden") is None and error.text, timeout=20,
                     what="the error banner")
            self.assertIn("Cannot reach the server", error.text)
            driver.save_screenshot(os.path.join(SHOTS, "error-narrow.png"))
        finally:
            driver.quit()
            server.stop()

    def test_no_webui_and_the_page_files(self):
        server = Server(INFERD, MODEL, "-c", "512", "--max-seqs", "1", "--no-webui")
        try:
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(server.base + "/", timeout=10)
            self.assertEqual(e.exception.code, 404)
        finally:
            server.stop()
        server = Server(INFERD, MODEL, "-c", "512", "--max-seqs", "1", "--api-key", API_KEY)
        try:
            # The page's own files need no key (they hold no data); the API still does.
            for path, kind in (("/", "text/html"), ("/app.js", "text/javascript"),
                               ("/style.css", "text/css")):
                with urllib.request.urlopen(server.base + path, timeout=10) as r:
                    self.assertTrue(r.headers["Content-Type"].startswith(kind), path)
                    self.assertIn("default-src 'self'", r.headers["Content-Security-Policy"])
                    self.assertTrue(r.read())
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(server.base + "/v1/models", timeout=10)
            self.assertEqual(e.exception.code, 401)
        finally:
            server.stop()


if __name__ == "__main__":
    print(f"screenshots: {SHOTS}")
    unittest.main(argv=[sys.argv[0], "-v"])
