#!/usr/bin/env bash
# Create .venv (if missing) and install islab-train with everything the tests and demo need.
# torch is installed first and pinned to 2.13.0: on our machines that is a CPU build that lies on
# disk; a bare "torch" requirement would pull a multi-GB CUDA build. On a GPU machine, install the
# torch build you want first and set ISLAB_TORCH_SPEC to it (e.g. ISLAB_TORCH_SPEC="torch").
#
# ISLAB_EXTRAS=mjlab creates .venv-mjlab instead, with the [mjlab] extra (mjlab pins rsl-rl-lib
# 5.4.2, .venv keeps 5.5.x: CI tests both, one job after the other: scripts/test.sh). The torch pin goes in as a
# constraint so mjlab's torchvision cannot replace the CPU torch with a CUDA build. mjlab: ~45 s, +1.5 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

install_venv() {  # install_venv DIR EXTRAS
    local venv=$1 extras=$2
    if [ ! -x "$venv/bin/python" ]; then
        "$PYTHON" -m venv "$venv"
    fi
    local stamp=$venv/.islab-installed
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ .ci/constraints.txt -nt "$stamp" ]; then
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet "${ISLAB_TORCH_SPEC:-torch==2.13.0}"
        local pin
        pin=$(mktemp)
        "$venv/bin/python" -c 'import torch; print(f"torch=={torch.__version__}")' > "$pin"
        local constraints=(-c "$pin")
        # The main venv installs CI's exact versions; the mjlab venv lets mjlab pick rsl-rl-lib.
        [ "$venv" = .venv ] && constraints+=(-c .ci/constraints.txt)
        "$venv/bin/python" -m pip install --quiet "${constraints[@]}" -e ".[$extras]"
        rm -f "$pin"
        touch "$stamp"
    fi
}

case ",${ISLAB_EXTRAS:-}," in
    *,mjlab,*) install_venv .venv-mjlab "dev,jax,mjlab" ;;
    *) install_venv .venv "dev,jax,onnx,wandb,sweep,k8s-test" ;;
esac
