#!/usr/bin/env bash
# End-to-end: one model split over 2 processes by mpirun (--pipeline-parallel 2: 15 layers
# each): the same greedy text as one process from `inferd run` and from `inferd serve` under
# concurrent requests, and a job whose last rank dies ends with errors, not a hang. Skips without
# mpirun or a model.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/model_parallel_test.py" "$1" pp 2
