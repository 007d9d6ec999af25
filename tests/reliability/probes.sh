#!/usr/bin/env bash
# Reliability probes of `inferd serve`'s HTTP layer: limits, timeouts, caps, bad inputs, disconnects (see the .py file).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/probes_test.py" "$1"
