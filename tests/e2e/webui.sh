#!/usr/bin/env bash
# End-to-end: the chat page in a real browser (chromium through Selenium; see the .py file).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/webui_test.py" "$1"
