#!/usr/bin/env bash
# End-to-end: the curl and openai-client examples of llama-server's README, run as they are
# written against `inferd serve` (see the .py file).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/llama_server_readme_test.py" "$1"
