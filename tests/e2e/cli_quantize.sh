#!/usr/bin/env bash
# End-to-end: `inferd quantize` on the default model (Q4_1): refused without --allow-requantize
# (exit 1, the flag named, no file left), then a Q8_0 copy whose inspect shows the file type,
# Q8_0 matrices and the norms kept; an unknown type is one clear error.
set -euo pipefail
inferd="$1"
model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL)"; exit 77; fi

dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

set +e
err="$("$inferd" quantize "$model" "$dir/q8.gguf" Q8_0 2>&1)"
code=$?
set -e
[[ $code == 1 ]]
grep -q -- "--allow-requantize" <<<"$err"
[[ ! -e "$dir/q8.gguf" ]]

out="$("$inferd" quantize --allow-requantize -t 2 "$model" "$dir/q8.gguf" Q8_0)"
grep -Eq "^\[ *1/272\] " <<<"$out"
grep -q "^file: " <<<"$out"
info="$("$inferd" inspect "$dir/q8.gguf")"
grep -q "^file type: Q8_0 (7)$" <<<"$info"
grep -Eq "blk.0.ffn_down.weight +Q8_0 +\[1536, 576\]" <<<"$info"
grep -Eq "blk.0.attn_norm.weight +F32 +\[576\]" <<<"$info"
grep -Eq "general.quantization_version" <<<"$("$inferd" inspect --all "$dir/q8.gguf")"

set +e
err="$("$inferd" quantize "$model" "$dir/x.gguf" Q9_K 2>&1)"
code=$?
set -e
[[ $code == 1 ]]
grep -q "unknown quantization type 'Q9_K'" <<<"$err"
echo "quantize e2e ok"
