"""The agent routes of `inferd serve` over HTTP: GET/POST /tools with the built-in tools (a
streamed shell command included) and an MCP server's tools, /cors-proxy forwarding only the
headers named for it, and the guards: the API key on every agent route, an origin the CORS
policy does not allow refused before anything runs, the routes off (403) unless asked for, and
no start on a public address without a key."""
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from server_harness import Server, args

API_KEY = "agent-key"
INFERD, MODEL = args()
server = None
workdir = None

# A minimal MCP server on stdio: one JSON-RPC message per line.
MCP_SERVER = r'''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue  # a notification
    method, rid = msg.get("method"), msg["id"]
    if method == "initialize":
        result = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "t", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "upper", "description": "upper-cases text",
                             "inputSchema": {"type": "object",
                                             "properties": {"text": {"type": "string"}}}}]}
    elif method == "tools/call":
        text = msg["params"]["arguments"]["text"]
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                     "params": {"level": "info", "data": "working"}}) + "\n")
        result = {"content": [{"type": "text", "text": text.upper()}]}
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid,
                                     "error": {"code": -32601, "message": "no"}}) + "\n")
        sys.stdout.flush()
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()
'''


def decoded(raw):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw  # /metrics, the page


def request(method, path, body=None, headers=None, base=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request((base or server.base) + path, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {API_KEY}", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, decoded(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, decoded(e.read()), dict(e.headers)


def call(tool, params, headers=None):
    return request("POST", "/tools", {"tool": tool, "params": params}, headers)


class Tools(unittest.TestCase):
    def test_listed_with_definitions_and_mcp_tools_prefixed(self):
        status, tools, _ = request("GET", "/tools")
        self.assertEqual(status, 200)
        names = [t["tool"] for t in tools]
        for name in ("read_file", "write_file", "edit_file", "grep_search", "file_glob_search",
                     "exec_shell_command", "mcp_upper"):
            self.assertIn(name, names)
        upper = next(t for t in tools if t["tool"] == "mcp_upper")
        self.assertEqual(upper["type"], "mcp")
        self.assertEqual(upper["definition"]["function"]["parameters"]["type"], "object")

    def test_files_written_edited_read_relative_to_the_cwd_header(self):
        cwd = {"x-tool-cwd": workdir}
        status, body, _ = call("write_file", {"path": "notes/a.txt", "content": "one\ntwo\n"}, cwd)
        self.assertEqual((status, body.get("result")), (200, "file written successfully"))
        status, body, _ = call("edit_file", {"path": "notes/a.txt",
                                             "edits": [{"old_text": "two", "new_text": "2"}]}, cwd)
        self.assertEqual(body.get("edits_applied"), 1, body)
        with open(os.path.join(workdir, "notes", "a.txt")) as f:
            self.assertEqual(f.read(), "one\n2\n")
        # A "cwd" written by the model is not where the tool runs: the header is.
        status, body, _ = call("read_file", {"path": "notes/a.txt", "cwd": "/"}, cwd)
        self.assertEqual(body.get("plain_text_response"), "one\n2\n")

    def test_a_tools_own_failure_is_an_answer_and_a_bad_runtime_a_500(self):
        status, body, _ = call("read_file", {"path": os.path.join(workdir, "missing")})
        self.assertEqual(status, 200)
        self.assertIn("error", body)
        status, body, _ = call("exec_shell_command", {"command": "true"},
                               {"x-tool-runtime": "docker-container:--privileged"})
        self.assertEqual(status, 500)
        self.assertIn("invalid container id", body["error"]["message"])
        status, body, _ = call("no_such_tool", {})
        self.assertEqual(status, 404)

    def test_shell_command_streams_its_output(self):
        req = urllib.request.Request(
            server.base + "/tools", method="POST",
            data=json.dumps({"tool": "exec_shell_command", "stream": True,
                             "params": {"command": "echo first; sleep 0.2; echo second; exit 3"}}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
        events = []
        with urllib.request.urlopen(req, timeout=60) as r:
            self.assertTrue(r.headers["Content-Type"].startswith("text/event-stream"))
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        self.assertEqual(events[-1], {"done": True})
        text = "".join(e["chunk"] for e in events[:-1])
        self.assertLess(text.index("first"), text.index("second"))
        self.assertIn("[exit code: 3]", text)
        # read_file cannot stream: 404 as llama-server answers.
        status, _, _ = request("POST", "/tools", {"tool": "read_file", "stream": True,
                                                  "params": {"path": workdir}})
        self.assertEqual(status, 404)

    def test_mcp_tool_called_past_its_notification(self):
        status, body, _ = call("mcp_upper", {"text": "quiet"})
        self.assertEqual((status, body), (200, {"plain_text_response": "QUIET"}))


class Guards(unittest.TestCase):
    def test_every_agent_route_needs_the_key(self):
        for method, path in (("GET", "/tools"), ("POST", "/tools"), ("GET", "/cors-proxy?url=x"),
                             ("POST", "/cors-proxy?url=x")):
            status, _, _ = request(method, path, {"tool": "read_file", "params": {}} if method == "POST" else None,
                                   {"Authorization": "Bearer wrong"})
            self.assertEqual(status, 401, path)

    def test_every_route_but_health_and_metrics_needs_the_key(self):
        # Every route of http_server.cpp's routes() and agent_routes.cpp (keep in step): without
        # the key, 401, whether the route would have served or refused the request. /health is
        # for load balancers, /metrics for scrapers (counts, no content), the page's files
        # hold no data.
        gets = ["/models", "/v1/models", "/props", "/slots", "/tools", "/cors-proxy?url=x"]
        posts = ["/v1/chat/completions", "/chat/completions", "/v1/chat/completions/input_tokens",
                 "/chat/completions/input_tokens", "/v1/completions", "/completion", "/completions",
                 "/infill", "/tokenize", "/detokenize", "/apply-template", "/embedding",
                 "/embeddings", "/v1/embeddings", "/rerank", "/reranking", "/v1/rerank",
                 "/v1/reranking", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
                 "/responses", "/v1/responses/input_tokens", "/responses/input_tokens", "/tools",
                 "/cors-proxy?url=x"]
        for method, paths in (("GET", gets), ("POST", posts)):
            for path in paths:
                status, _, _ = request(method, path, {} if method == "POST" else None,
                                       {"Authorization": ""})
                self.assertEqual(status, 401, f"{method} {path}")
        for path in ("/health", "/v1/health", "/metrics", "/"):
            status, _, _ = request("GET", path, None, {"Authorization": ""})
            self.assertEqual(status, 200, path)

    def test_a_page_from_another_origin_runs_nothing(self):
        marker = os.path.join(workdir, "from-evil")
        # A "simple" cross-origin POST (text/plain, no preflight) that a page could send.
        status, body, headers = call("write_file", {"path": marker, "content": "x"},
                                     {"Origin": "http://evil.example", "Content-Type": "text/plain"})
        self.assertEqual(status, 403)
        self.assertFalse(os.path.exists(marker))
        self.assertNotIn("Access-Control-Allow-Origin", headers)
        status, _, _ = call("write_file", {"path": marker, "content": "x"},
                            {"Origin": "http://localhost:3000"})
        self.assertEqual(status, 200)
        self.assertTrue(os.path.exists(marker))

    def test_routes_are_off_unless_asked_for(self):
        plain = Server(INFERD, MODEL, "-c", "256")
        try:
            for path in ("/tools", "/cors-proxy?url=http://127.0.0.1:1/"):
                status, _, _ = request("GET", path, base=plain.base)
                self.assertEqual(status, 403, path)
        finally:
            plain.stop()

    def test_no_start_on_a_public_address_without_a_key(self):
        # -ag: llama-server's short form of --agent (tools and proxy).
        for flags in (["--tools", "read_file"], ["--ui-mcp-proxy"], ["-ag"]):
            run = subprocess.run([INFERD, "serve", "-m", MODEL, "--host", "0.0.0.0", "--port", "0",
                                  *flags], capture_output=True, text=True, timeout=120)
            self.assertNotEqual(run.returncode, 0, flags)
            self.assertIn("--api-key", run.stderr, flags)


class CorsProxy(unittest.TestCase):
    def test_forwards_only_the_named_headers_and_relays_the_answer(self):
        seen = {}

        class Target(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                seen.update({k.lower(): v for k, v in self.headers.items()})
                seen["body"] = self.rfile.read(int(self.headers["Content-Length"])).decode()
                self.send_response(201)
                self.send_header("Content-Type", "text/plain")
                self.send_header("X-Remote", "yes")
                self.end_headers()
                self.wfile.write(b"remote answer")

            def log_message(self, *a):
                pass

        target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Target)
        threading.Thread(target=target.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{target.server_port}/mcp?x=1"
            req = urllib.request.Request(
                server.base + "/cors-proxy?url=" + urllib.parse.quote(url, safe=""), method="POST",
                data=b'{"jsonrpc": "2.0"}',
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}",
                         "Cookie": "session=secret",
                         "x-llama-server-proxy-header-authorization": "Bearer remote"})
            with urllib.request.urlopen(req, timeout=60) as r:
                self.assertEqual(r.status, 201)
                self.assertEqual(r.read(), b"remote answer")
                self.assertEqual(r.headers["X-Remote"], "yes")
            self.assertEqual(seen["authorization"], "Bearer remote")
            self.assertNotIn("cookie", seen)
            self.assertEqual(seen["body"], '{"jsonrpc": "2.0"}')
        finally:
            target.shutdown()
            target.server_close()

    def test_bad_urls_are_the_clients_error_and_dead_hosts_a_502(self):
        for url in ("ftp://x/", "http://user:pw@127.0.0.1/", "http:///nohost"):
            status, body, _ = request("GET", "/cors-proxy?url=" + urllib.parse.quote(url, safe=""))
            self.assertEqual(status, 400, url)
        status, _, _ = request("GET", "/cors-proxy?url=http://127.0.0.1:1/")
        self.assertEqual(status, 502)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        workdir = os.path.join(folder, "work")
        os.makedirs(workdir)
        mcp_script = os.path.join(folder, "mcp_server.py")
        with open(mcp_script, "w") as f:
            f.write(MCP_SERVER)
        config = json.dumps({"mcpServers": {"mcp": {"command": sys.executable, "args": [mcp_script]}}})
        server = Server(INFERD, MODEL, "-c", "256", "--api-key", API_KEY, "--tools", "all",
                        "--mcp-servers-json", config, "--ui-mcp-proxy")
        try:
            result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
        finally:
            started = time.monotonic()
            code = server.stop()
            stop_seconds = time.monotonic() - started
    if not result.wasSuccessful():
        sys.stderr.write("".join(server.log[-20:]))
        sys.exit(1)
    if stop_seconds > 5:
        sys.exit(f"the server took {stop_seconds:.1f} s to stop")
    sys.exit(0 if code in (0, -15) else f"server exit code {code}")
