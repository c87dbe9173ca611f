#!/usr/bin/env bash
# The GPU acceptance check (scripts/gpu_acceptance.py): run it first on any machine with GPUs.
#   scripts/gpu_acceptance.sh [--out gpu_acceptance.md] [--libs rsl_rl ...] [--skip-bench] [--dry-run]
# Uses .venv's interpreter when there is one (scripts/setup.sh; on a GPU machine install a CUDA torch
# first and set ISLAB_TORCH_SPEC, and `pip install "jax[cuda12]==<the jax pin>"` for skrl-JAX), else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
exec "$python" scripts/gpu_acceptance.py --python "$python" "$@"
