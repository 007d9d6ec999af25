#!/usr/bin/env bash
# README's first command asks the default model (SmolLM2-135M-Instruct) a question at the
# default sampling settings: its answer must be right, greedy and over several seeds. The prompt
# is read from README.md, so changing it there without checking its answer fails here.
# ("What is the capital of France?" got French nonsense on this file, greedy as in llama.cpp;
# the capital of England is answered "London" at every seed tried, 20 of 20.)
set -euo pipefail
inferd="$1"
model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL)"; exit 77; fi
readme="$(dirname "${BASH_SOURCE[0]}")/../../README.md"
prompt="$(grep -o -m1 'inferd run --chat -p "[^"]*"' "$readme" | sed 's/.*-p "\(.*\)"/\1/')"
expected="London"
[[ "$prompt" == "What is the capital of England?" ]] ||
  { echo "FAIL: README's first prompt is '$prompt': check its answer and update this test"; exit 1; }
answer="$("$inferd" run -m "$model" --chat -p "$prompt" --temp 0 --no-stats)"
grep -q "$expected" <<<"$answer" || { echo "FAIL: greedy answer has no $expected: $answer"; exit 1; }
for seed in 1 2 3 4 5 6 7 8; do
  # The default settings (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), seeded.
  answer="$("$inferd" run -m "$model" --chat -p "$prompt" --seed "$seed" --no-stats)"
  grep -q "$expected" <<<"$answer" ||
    { echo "FAIL: seed $seed: the answer has no $expected: $answer"; exit 1; }
  echo "ok: seed $seed: $(head -c 80 <<<"$answer" | tr '\n' ' ')"
done
