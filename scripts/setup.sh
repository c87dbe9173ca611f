#!/usr/bin/env bash
# Create .venv (if missing) and install islab-train with everything the tests and demo need.
# torch is installed first and pinned to 2.13.0: on our machines that is a CPU build that lies on
# disk; a bare "torch" requirement would pull a multi-GB CUDA build. On a GPU machine, install the
# torch build you want first and set ISLAB_TORCH_SPEC to it (e.g. ISLAB_TORCH_SPEC="torch").
#
# ISLAB_EXTRAS=mjlab creates .venv-mjlab instead, with the [mjlab] extra (mjlab pins rsl-rl-lib
# 5.4.2, .venv keeps 5.5.x: CI tests both, one job after the other: scripts/test.sh). The torch pin goes in as a
# constraint so mjlab's torchvision cannot replace the CPU torch with a CUDA build.
#
# The main setup also makes .venv-sky: SkyPilot alone (pinned in .ci/constraints.txt), whose task loader
# tests/sky/test_sky_schema.py runs in a subprocess; SkyPilot 0.14 needs click<8.2 and W&B 0.31 click>=8.2,
# so it cannot live in .venv. ISLAB_EXTRAS=sky makes only that one.
#
# ISLAB_EXTRAS=isaaclab makes .venv-isaaclab: Isaac Lab 3.0 (isaaclab==3.0.0 with skrl and rl_games) in a
# Python 3.12 venv, the Python of the ranks in the Isaac Lab job (islab-train itself runs from .venv and
# reaches it with --python). It is large (~8 GB, ~10 min), so it is built once per set of pins into a cache
# directory, ${ISLAB_VENV_CACHE:-~/.cache/islab-train/venvs}/isaaclab-<key> (key: a hash of the Python
# version and .ci/isaaclab3-*.txt), and .venv-isaaclab links to it: a CI machine that keeps ~/.cache
# between runs builds it once. ISLAB_ISAACLAB_PYTHON names another Python 3.12.
#
# Each step says what it installs and how long it took; pip's own progress shows on a terminal
# (in CI logs pip stays quiet). A venv already up to date (stamp newer than pyproject.toml and
# .ci/constraints.txt) is left as it is, in a fraction of a second.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
quiet=(--quiet)
[ -t 1 ] && quiet=(--progress-bar on)

say() { echo "islab setup: $*"; }

step() {  # step "what (why it is slow)" COMMAND...: one line before, one line with the seconds after
    local what=$1 started=$SECONDS
    shift
    say "$what"
    "$@"
    say "  done in $((SECONDS - started)) s"
}

install_venv() {  # install_venv DIR EXTRAS
    local venv=$1 extras=$2
    local stamp=$venv/.islab-installed
    if [ -f "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ] && [ ! .ci/constraints.txt -nt "$stamp" ]; then
        return 0
    fi
    local started=$SECONDS
    say "installing islab-train into $venv (once; later runs reuse it)"
    if [ ! -x "$venv/bin/python" ]; then
        step "[1/4] creating $venv with $("$PYTHON" --version 2>&1)" "$PYTHON" -m venv "$venv"
    fi
    step "[2/4] upgrading pip" "$venv/bin/python" -m pip install "${quiet[@]}" --upgrade pip
    step "[3/4] ${ISLAB_TORCH_SPEC:-torch==2.13.0} (the largest step: ~35 s for a CPU build already on disk; \
a CUDA build from PyPI is several GB and takes minutes)" \
        "$venv/bin/python" -m pip install "${quiet[@]}" "${ISLAB_TORCH_SPEC:-torch==2.13.0}"
    local pin
    pin=$(mktemp)
    "$venv/bin/python" -c 'import torch; print(f"torch=={torch.__version__}")' 2>/dev/null > "$pin"
    local constraints=(-c "$pin")
    # The main venv installs CI's exact versions; the mjlab venv lets mjlab pick rsl-rl-lib.
    [ "$venv" = .venv ] && constraints+=(-c .ci/constraints.txt)
    local why="rl-games, rsl-rl-lib, skrl, jax, Ray, ONNX Runtime, W&B...: ~1 min, ~1.5 GB"
    [[ ",$extras," == *,mjlab,* ]] && why="mjlab with MuJoCo-Warp, rsl-rl-lib 5.4.2, jax: ~1 min, ~1.5 GB"
    step "[4/4] islab-train with the extras $extras ($why)" \
        "$venv/bin/python" -m pip install "${quiet[@]}" "${constraints[@]}" -e ".[$extras]"
    rm -f "$pin"
    touch "$stamp"
    say "$venv is ready ($((SECONDS - started)) s)"
}

find_python312() {  # the Python 3.12 that Isaac Lab 3.0 requires (>=3.12,<3.13)
    local candidate
    for candidate in "${ISLAB_ISAACLAB_PYTHON:-}" python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12; do
        [ -n "$candidate" ] || continue
        # pyenv's shim exists even where 3.12 is not selected: ask the interpreter itself.
        if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            "$candidate" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    say "no Python 3.12 found: Isaac Lab 3.0 needs one (set ISLAB_ISAACLAB_PYTHON)" >&2
    return 1
}

install_isaaclab_venv() {  # .venv-isaaclab -> the cached venv for .ci/isaaclab3-*.txt
    local python key cache venv
    python=$(find_python312)
    key=$({ "$python" --version 2>&1; cat .ci/isaaclab3-requirements.txt .ci/isaaclab3-nodeps.txt; } | sha256sum | cut -c1-12)
    cache=${ISLAB_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/islab-train/venvs}
    venv=$cache/isaaclab-$key
    if [ -f "$venv/.islab-installed" ]; then
        say "reusing $venv (cached Isaac Lab 3.0 venv)"
    else
        local started=$SECONDS
        # A venv's scripts hold its absolute path, so it is built where it stays; a half-built one
        # (no stamp: an interrupted build) is started over.
        rm -rf "$venv"
        mkdir -p "$cache"
        say "building the Isaac Lab 3.0 venv $venv (once per set of pins)"
        step "[1/4] creating it with $("$python" --version 2>&1)" "$python" -m venv "$venv"
        step "[2/4] upgrading pip" "$venv/bin/python" -m pip install "${quiet[@]}" --upgrade pip
        step "[3/4] isaaclab 3.0.0, skrl and rl_games's small dependencies (the largest step: torch 2.11 \
CUDA build, newton, warp: ~10 min, ~8 GB)" \
            "$venv/bin/python" -m pip install "${quiet[@]}" -r .ci/isaaclab3-requirements.txt
        step "[4/4] rl-games without its dependencies" \
            "$venv/bin/python" -m pip install "${quiet[@]}" --no-deps -r .ci/isaaclab3-nodeps.txt
        touch "$venv/.islab-installed"
        say "$venv is ready ($((SECONDS - started)) s, $(du -sh "$venv" | cut -f1))"
    fi
    ln -sfn "$venv" .venv-isaaclab
}

install_sky_venv() {  # .venv-sky: SkyPilot alone, for tests/sky/test_sky_schema.py (its loader, in a subprocess)
    local venv=.venv-sky
    local stamp=$venv/.islab-installed
    if [ -f "$stamp" ] && [ ! .ci/constraints.txt -nt "$stamp" ]; then
        return 0
    fi
    local started=$SECONDS
    say "installing SkyPilot into $venv, apart from .venv (SkyPilot needs click<8.2, W&B click>=8.2)"
    if [ ! -x "$venv/bin/python" ]; then
        step "[1/2] creating $venv with $("$PYTHON" --version 2>&1)" "$PYTHON" -m venv "$venv"
    fi
    step "[2/2] skypilot, pinned in .ci/constraints.txt (~4 min, ~460 MB on a busy 2-core machine)" \
        "$venv/bin/python" -m pip install "${quiet[@]}" -c .ci/constraints.txt skypilot
    touch "$stamp"
    say "$venv is ready ($((SECONDS - started)) s)"
}

case ",${ISLAB_EXTRAS:-}," in
    *,isaaclab,*) install_isaaclab_venv ;;
    *,mjlab,*) install_venv .venv-mjlab "dev,jax,mjlab,video" ;;
    *,sky,*) install_sky_venv ;;
    *) install_venv .venv "dev,jax,onnx,wandb,sweep,k8s-test,video"
       install_sky_venv ;;
esac
