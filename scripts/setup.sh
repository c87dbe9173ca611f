#!/usr/bin/env bash
# Create .venv (if missing) and install islab-train with everything the tests and demo need.
# torch is installed first and pinned to 2.13.0: on our machines that is a CPU build that lies on
# disk; a bare "torch" requirement would pull a multi-GB CUDA build. On a GPU machine, install the
# torch build you want first and set ISLAB_TORCH_SPEC to it (e.g. ISLAB_TORCH_SPEC="torch").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.islab-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ .ci/constraints.txt -nt "$stamp" ]; then
    python -m pip install --quiet --upgrade pip
    python -m pip install --quiet "${ISLAB_TORCH_SPEC:-torch==2.13.0}"
    python -m pip install --quiet -c .ci/constraints.txt -e ".[dev,jax,onnx]"
    touch "$stamp"
fi
