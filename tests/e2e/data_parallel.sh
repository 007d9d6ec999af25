#!/usr/bin/env bash
# End-to-end: 2 processes under mpirun, each with the whole model and its own sequences
# (--data-parallel 2; a mixture of experts also with --expert-parallel: its experts spread, the
# tokens sent to them and back): the same greedy text as one process from `inferd run` and from
# `inferd serve` under concurrent requests, and a job whose last rank dies ends with errors, not
# a hang. Skips without mpirun or a model.
exec python3 "$(dirname "${BASH_SOURCE[0]}")/model_parallel_test.py" "$1" dp 2
