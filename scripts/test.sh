#!/usr/bin/env bash
# Set up (first time only) and run the whole test suite, slow end-to-end tests included.
# ISLAB_TEST_JOB=mjlab runs the other CI job instead: .venv-mjlab (the [mjlab] extra: mjlab 1.6,
# rsl-rl-lib 5.4.2) with the mjlab tests and the rsl_rl adapter and resume tests. In .venv (rsl-rl-lib
# 5.5.x, no mjlab) the mjlab tests skip. CI runs both jobs in parallel: each alone stays under 15 min.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${ISLAB_TEST_JOB:-main}" = mjlab ]; then
    ISLAB_EXTRAS=mjlab bash scripts/setup.sh
    export WARP_CACHE_PATH=${WARP_CACHE_PATH:-$PWD/.venv-mjlab/warp-cache}  # Warp compiles once per job
    exec .venv-mjlab/bin/python -m pytest "$@" tests/test_mjlab.py tests/test_lib_rsl_rl.py tests/test_resume.py -k "mjlab or rsl_rl"
fi
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
