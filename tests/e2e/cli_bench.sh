#!/usr/bin/env bash
# End-to-end: `inferd bench --json` on the default model gives llama-bench's fields and the
# roofline's, whose relations hold whatever the machine's speed: a positive, finite read
# bandwidth from a probe buffer of at least 1 GiB, a decode fraction equal to achieved / probed,
# and bandwidth_bound_exceeded exactly when that fraction is above 1; the text report never
# shows a share above 100% without saying the bound is wrong.
set -euo pipefail
inferd="$1"
model="${INFERD_MODEL:-}"
if [[ -z "$model" || ! -f "$model" ]]; then echo "SKIP: no model (set INFERD_MODEL)"; exit 77; fi

json="$("$inferd" bench -m "$model" -p 8 -n 4 -r 1 -t 2 --json)"
python3 - "$json" <<'PY'
import json, math, sys
tests = json.loads(sys.argv[1])
assert [t["n_prompt"] for t in tests] == [8, 0], tests
for t in tests:
    bw = t["read_bandwidth_gbs"]
    assert math.isfinite(bw) and bw > 0, bw
    assert 0 < t["read_bandwidth_median_gbs"] <= bw, t
    assert t["read_bandwidth_buffer_mib"] >= 1024, t
    assert t["read_bandwidth_isa"] in ("ref", "avx2", "avx512", "amx"), t
    assert t["avg_ts"] > 0, t
tg = tests[1]
fraction = tg["achieved_gbs"] / tg["read_bandwidth_gbs"]
assert math.isclose(tg["bandwidth_fraction"], fraction, rel_tol=1e-9), tg
assert tg["bandwidth_bound_exceeded"] == (fraction > 1), tg
PY

out="$("$inferd" bench -m "$model" -p 0 -n 4 -r 1 -t 2)"
grep -Eq "^roofline \(2 threads, measured read bandwidth [0-9.]+ GB/s" <<<"$out"
share="$(grep -Eo "= [0-9]+% of bandwidth" <<<"$out" | grep -Eo "[0-9]+")"
if ((share > 100)); then echo "share above 100%: $out"; exit 1; fi
echo "bench e2e ok"
