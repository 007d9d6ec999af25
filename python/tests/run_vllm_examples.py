#!/usr/bin/env python3
"""Runs vLLM's offline-inference example scripts on inferd, with only their import lines changed
(`vllm` -> `inferd`), and prints which ran and which did not, with the error's last line.

    python/tests/run_vllm_examples.py [--sdist vllm-X.tar.gz] [--model FILE]

The scripts come from vLLM's sdist on PyPI (fetched to /tmp unless --sdist names one; nothing
of vLLM is kept in this repository): examples/basic/offline_inference/*.py, or
examples/offline_inference/basic/*.py in older releases. They name Hugging Face models, so
they run with INFERD_SUBSTITUTE_MODEL set to the GGUF file (default: INFERD_MODEL, else what
scripts/fetch-model prints): inferd.LLM opens that file for a model name that is not a file."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("examples/basic/offline_inference/", "examples/offline_inference/basic/")


def fetch_sdist(dest: Path) -> Path:
    """The newest vLLM sdist, from PyPI's JSON API (pip download would build its metadata,
    which needs torch)."""
    with urllib.request.urlopen("https://pypi.org/pypi/vllm/json", timeout=60) as r:
        info = json.load(r)
    url = next(u["url"] for u in info["urls"] if u["packagetype"] == "sdist")
    if url.startswith("../"):  # a mirror may answer with a relative address
        url = "https://pypi.org/" + url.lstrip("./")
    path = dest / url.rsplit("/", 1)[1]
    if not path.exists():
        urllib.request.urlretrieve(url, path)
    return path


def only_imports_changed(source: str) -> str:
    """`from vllm... import` / `import vllm...` lines name inferd instead; nothing else changes."""
    lines = []
    for line in source.splitlines(keepends=True):
        if re.match(r"\s*(from|import)\s+vllm\b", line):
            line = re.sub(r"\bvllm\b", "inferd", line, count=1)
        lines.append(line)
    return "".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", help="vLLM's sdist (.tar.gz); default: the newest, fetched to /tmp")
    ap.add_argument("--model", help="GGUF file the scripts' model names stand for")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per script")
    args = ap.parse_args()
    model = args.model or os.environ.get("INFERD_MODEL") or subprocess.run(
        [str(ROOT / "scripts" / "fetch-model")], check=True, capture_output=True, text=True).stdout.strip()
    sdist = Path(args.sdist) if args.sdist else fetch_sdist(Path(tempfile.gettempdir()))

    work = Path(tempfile.mkdtemp(prefix="vllm-examples-"))
    scripts = []
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) == 2 and member.isfile() and member.name.endswith(".py") and \
                    any(parts[1].startswith(f) and "/" not in parts[1][len(f):] for f in FOLDERS):
                source = tar.extractfile(member).read().decode()
                path = work / Path(member.name).name
                path.write_text(only_imports_changed(source))
                scripts.append(path)
    if not scripts:
        print(f"no offline-inference examples in {sdist}", file=sys.stderr)
        return 1
    print(f"{sdist.name}: {len(scripts)} scripts, model {model}")
    env = dict(os.environ, INFERD_SUBSTITUTE_MODEL=model)
    results = []
    for path in sorted(scripts):
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                                  timeout=args.timeout, env=env, cwd=work)
            ok, out, err = proc.returncode == 0, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            ok, out, err = False, "", f"timed out after {args.timeout:.0f} s"
        seconds = time.monotonic() - start
        why = "" if ok else (err.strip().splitlines() or ["(no message)"])[-1]
        results.append((path.name, ok, seconds, why))
        print(f"\n=== {path.name}: {'ran' if ok else 'did not run'} ({seconds:.1f} s)")
        print(out.strip()[-1500:] if ok else why)
    print("\nsummary:")
    for name, ok, seconds, why in results:
        print(f"  {name:12} {'ran' if ok else 'did not run: ' + why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
