#!/usr/bin/env bash
# End-to-end: LoRA adapters chosen per request (llama-server's /lora-adapters and `lora`, vLLM's
# --lora-modules by model name).
exec python3 "$(dirname "${BASH_SOURCE[0]}")/server_lora_test.py" "$1"
