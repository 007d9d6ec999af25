#!/usr/bin/env bash
# The inferd binary does not link cuBLAS. The CUDA executor opens it when it starts
# (cuda/cublas_library.h); linked, libcublas and libcublasLt added about 200 MB to the resident
# memory of every inferd process (`inferd --help` peaked at 227 MB, 11 MB without them), CPU
# runs and every rank of a split model included.
set -euo pipefail
inferd="$1"
if ldd "$inferd" | grep -E 'libcublas'; then
  echo "FAIL: $inferd links cuBLAS (above); it must be opened at run time" >&2
  exit 1
fi
echo "inferd links no cuBLAS"
