#!/usr/bin/env bash
# End-to-end: Gemma 4 chat (its thought channel, its tool-call syntax) through the openai client.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/server_gemma4_test.py" "$1"
