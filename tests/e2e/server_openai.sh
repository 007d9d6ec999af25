#!/usr/bin/env bash
# End-to-end: `inferd serve` driven by the official openai Python client (see the .py file).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/server_openai_test.py" "$1"
