#!/usr/bin/env bash
# End-to-end: the inferd binary does not link cuBLAS (the CUDA executor opens it when it starts,
# cuda/cublas_library.h), so a CPU run does not carry libcublas and libcublasLt (about 200 MB
# resident, on every process and every rank of a split model); and `inferd --help` stays a
# small process.
set -euo pipefail
inferd="$1"
if ldd "$inferd" | grep -E 'libcublas'; then
  echo "FAIL: $inferd links cuBLAS (above); it must be opened at run time" >&2
  exit 1
fi
peak_kb="$( { /usr/bin/time -f '%M' "$inferd" --help >/dev/null; } 2>&1 | tail -1)"
echo "inferd --help: peak resident ${peak_kb} kB"
if (( peak_kb > 65536 )); then
  echo "FAIL: inferd --help peaked at ${peak_kb} kB (over 64 MiB): a library it loads at start is large" >&2
  exit 1
fi
