#!/usr/bin/env bash
# Set up (first time only) and run a real 2-rank training job on CPU ranks over gloo.
# Extra arguments go to islab-train, e.g.:  scripts/demo.sh --lib skrl --max-iterations 100
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/islab-train --lib rsl_rl --device cpu --nproc 2 --num-envs 1024 --max-iterations 60 "$@"
