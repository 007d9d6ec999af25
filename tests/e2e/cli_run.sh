#!/usr/bin/env bash
# End-to-end: `inferd run` streams a greedy answer and its timing line; a stop string ends the
# text before it; a prompt longer than the context is one clear error; `inferd chat` keeps
# history across turns, /reset clears it, end of input exits; tokenize/detokenize round-trip.
set -euo pipefail
inferd="$1"
model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL)"; exit 77; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# fails_with CODE PATTERN COMMAND...: COMMAND must exit with CODE ("nonzero": any but 0) and
# say PATTERN on stderr. (A bare `[[ $code == N ]] && grep` line checks nothing: set -e ignores
# a failure before the last command of an && list.)
fails_with() {
  local want=$1 pattern=$2 err code
  shift 2
  set +e
  err="$("$@" 2>&1 >/dev/null)"
  code=$?
  set -e
  if [[ $code == 0 || ($want != nonzero && $code != "$want") ]] || ! grep -Eq -- "$pattern" <<<"$err"; then
    echo "expected exit $want and /$pattern/ from: $* -- got exit $code: $err" >&2
    exit 1
  fi
}

out="$("$inferd" run -m "$model" -p "The capital of France is" -n 16 --temp 0 2>err.txt)"
grep -q "Paris" <<<"$out"
grep -Eq "prompt 5 tokens, TTFT [0-9.]+ ms, prefill [0-9.]+ tok/s \| generated 16 tokens, decode [0-9.]+ tok/s, mean ITL" err.txt

stopped="$("$inferd" run -m "$model" -p "The capital of France is" -n 16 --temp 0 --stop "aris" --no-stats)"
[[ "$stopped" == *" P" ]] || { echo "stop string not honoured: '$stopped'"; exit 1; }
! grep -q "aris" <<<"$stopped"

long="$(printf 'word %.0s' $(seq 1 300))"
fails_with 1 "more than the context of 128" "$inferd" run -m "$model" -c 128 -p "$long" -n 8

# History: the second turn's prompt holds the first turn; after /reset the prompt is short again.
printf 'My name is Ada.\nWhat is my name?\n/reset\nMy name is Ada.\n' |
  "$inferd" chat -m "$model" --temp 0 -n 24 >/dev/null 2>chat_err.txt
grep -q "history cleared" chat_err.txt
mapfile -t prompts < <(grep -Eo "prompt [0-9]+ tokens" chat_err.txt | grep -Eo "[0-9]+")
[[ ${#prompts[@]} == 3 ]]
(( prompts[1] > prompts[0] + 10 ))
[[ ${prompts[2]} == "${prompts[0]}" ]]

ids="$("$inferd" tokenize -m "$model" --json "Grüße, 世界!" | python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["ids"])))')"
[[ "$("$inferd" detokenize -m "$model" $ids)" == "Grüße, 世界!" ]]
# Structured output: a schema inline and from a file, a grammar file, and a refused schema.
schema='{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0}},"required":["name","age"]}'
echo "$schema" >schema.json
for source in "$schema" schema.json; do
  "$inferd" run -m "$model" --chat -p "Describe a person." --json-schema "$source" -n 100 \
    --temp 0.8 -s 4 --no-stats >person.json
  python3 -c 'import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.loads(sys.argv[2]))' \
    person.json "$schema"
done
printf 'root ::= "yes" | "no"\n' >yesno.gbnf
answer="$("$inferd" run -m "$model" -p "Is Paris in France?" --grammar yesno.gbnf -n 8 --no-stats 2>grammar_err.txt)"
[[ "$answer" == "yes" || "$answer" == "no" ]] || { echo "grammar not honoured: '$answer'"; exit 1; }
fails_with 1 "unsupported JSON Schema keyword 'contains'" \
  "$inferd" run -m "$model" -p "x" --json-schema '{"type":"array","contains":{}}'
# --device: llama.cpp's names are taken; an unknown device is refused by name. On a machine
# without a CUDA device (or a build without CUDA) `--device cuda` is a one-line error, never a
# crash; with one, the model runs there.
"$inferd" run -m "$model" -p "Hi" -n 2 --device none --no-stats >/dev/null
# (A usage error: CLI11's validation exit code.)
fails_with nonzero "'gpu' is not a device" "$inferd" run -m "$model" -p "Hi" -n 2 --device gpu
set +e
err="$("$inferd" run -m "$model" -p "Hi" -n 2 --device cuda --no-stats 2>&1 >/dev/null)"
code=$?
set -e
if ((code != 0)); then
  [[ $code == 1 ]] || exit 1
  grep -Eq "no CUDA device is available|built without CUDA" <<<"$err"
fi
# LoRA flags reach the loader: a model given as an adapter is refused by name; a scale without
# a file is a usage error.
fails_with nonzero "not a LoRA adapter" "$inferd" run -m "$model" -p "Hi" -n 2 --lora "$model"
fails_with nonzero "is not FNAME:SCALE" "$inferd" run -m "$model" -p "Hi" -n 2 --lora-scaled "$model"
# (bench and perplexity take them too, to measure what an adapter costs and changes)
fails_with nonzero "not a LoRA adapter" "$inferd" bench -m "$model" -p 8 -n 2 -r 1 --lora "$model"
fails_with nonzero "not a LoRA adapter" "$inferd" perplexity "$model" "$0" --lora "$model"
echo "run e2e ok"
