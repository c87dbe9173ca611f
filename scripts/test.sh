#!/usr/bin/env bash
# Set up (first time only) and run the whole test suite, slow end-to-end tests included.
# With ISLAB_EXTRAS=mjlab (CI sets it), the mjlab tests and the rsl_rl adapter tests also run in
# .venv-mjlab (mjlab 1.6, rsl-rl-lib 5.4.2); in .venv they skip (no mjlab) or run on 5.5.x.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ -x .venv-mjlab/bin/python ] && [[ ",${ISLAB_EXTRAS:-}," == *,mjlab,* ]]; then
    export WARP_CACHE_PATH=${WARP_CACHE_PATH:-$PWD/.venv-mjlab/warp-cache}
    .venv-mjlab/bin/python -m pytest "$@" tests/test_mjlab.py tests/test_lib_rsl_rl.py || status=$?
fi
exit $status
