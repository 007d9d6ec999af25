#!/usr/bin/env bash
# End-to-end: gpt-oss chat (harmony channels, forced tool calls) through the openai client.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/server_gpt_oss_test.py" "$1"
