"""Every curl and openai-client example of llama-server's README (tools/server/README.md in the
llama-cpp-python sdist that scripts/fetch-llama-src unpacks), run against `inferd serve`.

The examples are read from the README at run time and run as written; the only change is the
address (they name localhost:8080 or 127.0.0.1:8012), pointed at a server started for the
example's kind: chat and completions, --embedding, --reranking. A curl example passes when its
answer is JSON without an "error" (or with a null one); a Python one when it exits 0 and prints something.
Skipped with a reason: examples that need a multimodal model (inferd loads text models only).
Needs INFERD_LLAMA_SRC (else skip, 77), INFERD_MODEL, curl, jq and the openai package."""
import json
import os
import re
import subprocess
import sys

from server_harness import Server, args

INFERD, MODEL = args()
LLAMA_SRC = os.environ.get("INFERD_LLAMA_SRC", "")
README = os.path.join(LLAMA_SRC, "tools", "server", "README.md")
ADDRESS = re.compile(r"https?://(localhost|127\.0\.0\.1):\d+")


def examples(text):
    """(language, code) of each fenced block that is a curl command or uses the openai client."""
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        code = "\n".join(line[2:] if line.startswith("  ") else line for line in body.splitlines())
        code = code.strip()
        if lang in ("sh", "shell", "bash") and code.startswith("curl"):
            yield "curl", code
        elif lang == "python" and "openai" in code:
            yield "python", code


def kind_of(code):
    if "/rerank" in code:
        return "rerank"
    if "/embeddings" in code:
        return "embedding"
    return "chat"


def main():
    if not os.path.exists(README):
        print("SKIP: no llama.cpp sources (set INFERD_LLAMA_SRC to scripts/fetch-llama-src's folder)")
        sys.exit(77)
    found = list(examples(open(README).read()))
    if len(found) < 10:
        sys.exit(f"only {len(found)} examples found in {README}: has its format changed?")
    # -n: requests that set no max_tokens (the limerick) stop after 96 tokens, not at the
    # context's end; a server flag, as llama-server's users set it.
    flags = {"chat": ["-c", "2048", "-n", "96"], "embedding": ["-c", "512", "--embedding"],
             "rerank": ["-c", "512", "--reranking"]}
    servers = {}
    failures = []
    try:
        for i, (lang, code) in enumerate(found):
            name = f"example {i + 1} ({lang}: {code.splitlines()[0][:60]})"
            if '"image_url"' in code or '"input_audio"' in code:
                print(f"skip {name}: needs a multimodal model")
                continue
            kind = kind_of(code)
            if kind not in servers:
                servers[kind] = Server(INFERD, MODEL, *flags[kind])
            runnable = ADDRESS.sub(servers[kind].base, code)
            if lang == "curl":
                run = subprocess.run(["bash", "-c", "set -o pipefail; " + runnable],
                                     capture_output=True, text=True, timeout=300)
                try:
                    body = json.loads(run.stdout)
                except ValueError:
                    body = None
                # A Responses object carries "error": null when all went well.
                ok = run.returncode == 0 and isinstance(body, (dict, list)) and not (
                    isinstance(body, dict) and body.get("error") is not None)
            else:
                run = subprocess.run([sys.executable, "-c", runnable], capture_output=True,
                                     text=True, timeout=300)
                ok = run.returncode == 0 and run.stdout.strip() != ""
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
            if not ok:
                failures.append(f"{name}: exit {run.returncode}\n{run.stdout[-800:]}\n{run.stderr[-800:]}")
    finally:
        for server in servers.values():
            server.stop()
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
