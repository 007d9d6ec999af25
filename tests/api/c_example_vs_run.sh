#!/usr/bin/env bash
# The C example (examples/c/generate.c, on the C ABI) against `inferd run` on the default model:
# greedy text identical (plain and chat), seeded sampling identical to run's and reproducible,
# n = 4 choices reproducible (choice i equal to n = 1 with seed + i), a stop string, a JSON
# schema, and streamed text equal to the result.
# Usage: c_example_vs_run.sh INFERD C_EXAMPLE; skips (77) without INFERD_MODEL.
set -euo pipefail
inferd="$1"
example="$2"
model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL)"; exit 77; fi
fail() { echo "FAIL: $*"; exit 1; }

same() {  # same WHAT RUN_ARGS -- EXAMPLE_ARGS: inferd run's text and the example's are equal
  local what="$1" run_out ex_out
  shift
  local run_args=() ex_args=()
  while [[ "$1" != "--" ]]; do run_args+=("$1"); shift; done
  shift
  ex_args=("$@")
  run_out="$("$inferd" run -m "$model" --no-stats "${run_args[@]}")"
  ex_out="$("$example" "$model" "${ex_args[@]}" 2>/dev/null)"
  [[ "$run_out" == "$ex_out" ]] || fail "$what: inferd run gave '$run_out', the C example '$ex_out'"
  [[ -n "$run_out" ]] || fail "$what: empty output"
  echo "ok: $what ($(wc -c <<<"$run_out") bytes)"
}

prompt="The capital of France is"
same "greedy" -p "$prompt" -n 32 --temp 0 -- "$prompt" -n 32 --temp 0
same "greedy chat" --chat -p "What is 2 + 2?" -n 40 --temp 0 -- "What is 2 + 2?" --chat -n 40 --temp 0
same "seeded" -p "Once upon a time" -n 32 --seed 11 -- "Once upon a time" -n 32 --seed 11
same "seeded chat, temperature 1" --chat -p "Tell me a story." -n 32 --seed 5 --temp 1 -- \
  "Tell me a story." --chat -n 32 --seed 5 --temp 1
same "stop string" -p "$prompt" -n 16 --temp 0 --stop "aris" -- "$prompt" -n 16 --temp 0 --stop "aris"
stopped="$("$example" "$model" "$prompt" -n 16 --temp 0 --stop "aris" 2>/dev/null)"
[[ "$stopped" == *" P" ]] || fail "stop string not honoured: '$stopped'"

a="$("$example" "$model" "Once upon a time" -n 24 --seed 3 --temp 1 --choices 4 2>/dev/null)"
b="$("$example" "$model" "Once upon a time" -n 24 --seed 3 --temp 1 --choices 4 2>/dev/null)"
[[ "$a" == "$b" ]] || fail "n = 4 with a seed is not reproducible"
[[ "$(grep -c '^\[choice [0-3]\] ' <<<"$a")" == 4 ]] || fail "n = 4 gave: $a"
[[ "$(grep '^\[choice ' <<<"$a" | sort -u | wc -l)" -ge 2 ]] || fail "4 choices at temperature 1 were all the same"
# Choice i samples with seed + i: choices 0 and 1 are the n = 1 answers of seeds 3 and 4.
for i in 0 1; do
  single="$("$example" "$model" "Once upon a time" -n 24 --seed $((3 + i)) --temp 1 2>/dev/null)"
  [[ "$(sed -n "s/^\[choice $i\] //p" <<<"$a")" == "$single" ]] ||
    fail "choice $i of n = 4 is not the seed $((3 + i)) answer '$single': $a"
done
echo "ok: n = 4 reproducible, $(grep '^\[choice ' <<<"$a" | sort -u | wc -l) distinct choices, choice i = seed + i"

schema='{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0}},"required":["name","age"]}'
json="$("$example" "$model" "Describe a person." --chat --json-schema "$schema" -n 100 --temp 0.8 --seed 4 2>/dev/null)"
python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert isinstance(d["name"], str) and isinstance(d["age"], int) and d["age"] >= 0 and len(d["name"]) <= 20, d' \
  "$json" || fail "JSON schema not honoured: '$json'"
same "JSON schema" --chat -p "Describe a person." --json-schema "$schema" -n 100 --temp 0.8 -s 4 -- \
  "Describe a person." --chat --json-schema "$schema" -n 100 --temp 0.8 --seed 4
echo "ok: JSON schema: $json"

streamed="$("$example" "$model" "$prompt" -n 32 --temp 0 --stream 2>/dev/null)"
plain="$("$example" "$model" "$prompt" -n 32 --temp 0 2>/dev/null)"
[[ "$streamed" == "$plain" ]] || fail "streamed '$streamed' but the result is '$plain'"
echo "ok: streaming"

set +e
err="$("$example" /nonexistent.gguf "x" 2>&1 >/dev/null)"
code=$?
set -e
[[ $code == 1 ]] || fail "a missing model exited $code"
grep -q "error (model error): .*nonexistent.gguf" <<<"$err" || fail "missing model: '$err'"
echo "ok: missing model is an error: $err"
