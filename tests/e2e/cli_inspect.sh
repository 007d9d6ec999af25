#!/usr/bin/env bash
# End-to-end: `inferd inspect` on the default model shows the architecture, the 30 layers and
# the whole tensor table; a non-GGUF file gets one clear error and exit code 1. (First, with or
# without a model: `inferd --version` prints the version and exits 0.)
set -euo pipefail
inferd="$1"
grep -Eq "^inferd [0-9]+\.[0-9]+\.[0-9]+$" <<<"$("$inferd" --version)"
model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL)"; exit 77; fi

out="$("$inferd" inspect "$model")"
grep -q "^architecture: llama$" <<<"$out"
grep -Eq "llama.block_count +30$" <<<"$out"
[[ "$(grep -c "^  blk\.[0-9]*\." <<<"$out")" == 270 ]]
grep -Eq "token_embd.weight +Q8_0 +\[576, 49152\]" <<<"$out"
grep -q "chat template: present" <<<"$out"

bad="$(mktemp)"
echo "not a model" >"$bad"
set +e
err="$("$inferd" inspect "$bad" 2>&1)"
code=$?
set -e
rm -f "$bad"
[[ $code == 1 ]]
grep -q "not a GGUF file" <<<"$err"
echo "inspect e2e ok"
