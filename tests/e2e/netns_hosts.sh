#!/usr/bin/env bash
# End-to-end on the project's test hosts (scripts/netns-hosts): ranks in network namespaces of
# their own joined by veth through a bridge, each link shaped to 1 Gbit/s, MPI over TCP only.
# SmolLM2 split over 3 hosts by tensor parallelism (its 9 heads and 3 kv heads take 3) and over 2
# by pipeline parallelism gives the greedy text one process gives; the pipeline once more with
# 1 ms of (emulated) link latency; a random-weight Qwen3-MoE (make-golden's) over 2 hosts with
# its experts spread (-tp 2 --expert-parallel; -dp 2 --expert-parallel, where the tokens cross
# to their experts' host and back) gives its one-process text too. Skips without root, ip netns,
# mpirun or a model.
set -euo pipefail
inferd="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
model="${INFERD_MODEL:-}"
if [ "$(id -u)" != 0 ] || ! command -v mpirun >/dev/null || [ ! -f "$model" ] ||
  ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root, ip netns, mpirun and INFERD_MODEL"
  exit 77
fi
# mpirun as root (CI's containers); no leak report from a sanitized build at exit (what OpenMPI
# keeps from MPI_Init is its own).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
log="$(mktemp /tmp/inferd-netns-log.XXXXXX)"
trap '"$root/scripts/netns-hosts" down; rm -f "$log"' EXIT
"$root/scripts/netns-hosts" up 3 --rate 1gbit
# What mpirun and the ranks said goes to $log; a failure prints it.
fail() {
  printf 'FAIL: %s\n--- what mpirun and the ranks printed:\n' "$1"
  tail -n 40 "$log"
  exit 1
}
prompt="The capital of France is"
args=(run -m "$model" -p "$prompt" -n 24 --temp 0 -t 1)
expected="$("$inferd" "${args[@]}" 2>/dev/null)"
for split in "-tp 3" "-pp 2"; do
  ranks="${split#* }"
  read -r -a flags <<<"$("$root/scripts/netns-hosts" mpirun-flags "$ranks")"
  started=$(date +%s.%N)
  # shellcheck disable=SC2086
  got="$(timeout 300 mpirun "${flags[@]}" "$inferd" "${args[@]}" $split 2>"$log")" ||
    fail "$split exited with $?"
  [ "$got" = "$expected" ] || fail "$(printf '%s over the test hosts gave\n%s\nnot\n%s' "$split" "$got" "$expected")"
  echo "$split on $ranks hosts over 1 Gbit/s: the same greedy text ($(echo "$(date +%s.%N) - $started" | bc) s)"
done
got="$(INFERD_EMULATED_LINK_LATENCY_US=1000 timeout 300 mpirun "${flags[@]}" -x INFERD_EMULATED_LINK_LATENCY_US \
  "$inferd" "${args[@]}" -pp 2 2>"$log")" || fail "-pp 2 with 1 ms latency exited with $?"
[ "$got" = "$expected" ] || fail "-pp 2 with 1 ms latency parted"
echo "-pp 2 with 1 ms of link latency: the same greedy text"
moe="${INFERD_CACHE:-$HOME/.cache/inferd}/golden-models/qwen3moe-seed7.F16.gguf"
if [ -f "$moe" ]; then
  moe_args=(run -m "$moe" -p "$prompt" -n 24 --temp 0 -t 1)
  expected="$("$inferd" "${moe_args[@]}" 2>/dev/null)"
  read -r -a flags <<<"$("$root/scripts/netns-hosts" mpirun-flags 2)"
  got="$(timeout 300 mpirun "${flags[@]}" "$inferd" "${moe_args[@]}" -tp 2 --expert-parallel 2>"$log")" ||
    fail "-tp 2 --expert-parallel exited with $?"
  [ "$got" = "$expected" ] || fail "$(printf -- '-tp 2 --expert-parallel gave\n%s\nnot\n%s' "$got" "$expected")"
  echo "qwen3moe -tp 2 --expert-parallel on 2 hosts: the same greedy text"
  got="$(timeout 300 mpirun "${flags[@]}" "$inferd" "${moe_args[@]}" -dp 2 --expert-parallel 2>"$log")" ||
    fail "-dp 2 --expert-parallel exited with $?"
  [ "$got" = "$expected" ] || fail "$(printf -- '-dp 2 --expert-parallel gave\n%s\nnot\n%s' "$got" "$expected")"
  echo "qwen3moe -dp 2 --expert-parallel on 2 hosts (tokens sent to their experts' host): the same greedy text"
fi
