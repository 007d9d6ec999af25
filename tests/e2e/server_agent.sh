#!/usr/bin/env bash
# End-to-end: llama-server's agent routes (/tools with built-in and MCP tools, /cors-proxy)
# and their guards (API key, origins, exposure), against `inferd serve` (see the .py file).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/server_agent_test.py" "$1"
