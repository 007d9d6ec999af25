#!/usr/bin/env bash
# End-to-end: 32 concurrent streams equal their solo runs; 200 disconnects free every block.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/server_concurrency_test.py" "$1"
