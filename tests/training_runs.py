"""Launching real training runs from tests: the four library paths and one CPU launch helper.

Shared by the end-to-end, task, environment and resume tests; each test names what it checks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env

ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]

# The four library paths, skrl-JAX only where jax is installed (failed, not skipped, under CI=true).
PATHS = [
    pytest.param("rsl_rl", "torch", id="rsl_rl"),
    pytest.param("rl_games", "torch", id="rl_games"),
    pytest.param("skrl", "torch", id="skrl-torch"),
    pytest.param("skrl", "jax", id="skrl-jax", marks=pytest.mark.needs("jax")),
]


def launch(
    tmp_path: Path,
    lib: str,
    ml_framework: str,
    *extra: str,
    env: dict[str, str] | None = None,
    iterations: tuple[str, ...] = ("--max-iterations", "3"),
):
    command = [
        *ISLAB_TRAIN,
        "--lib", lib,
        "--ml-framework", ml_framework,
        "--device", "cpu",
        "--nproc", "2",
        "--num-envs", "64",
        *iterations,
        "--log-dir", str(tmp_path / "logs"),
        "--run-name", "e2e",
        *extra,
    ]  # fmt: skip
    environment = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    environment.update(env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)


# One tiny 1-rank CPU run per library path (64 envs, 2 iterations, a checkpoint after each), shared by
# the tests that only read a trained run (conftest's ``one_rank_run``: play/export, TensorBoard
# events). rsl_rl trains with its observation normalizer on (off in the Cartpole config), so an export
# that forgets the normalizer shows for every library.
ONE_RANK_OVERRIDES = {"rsl_rl": ("actor.obs_normalization=true",)}


def train_one_rank(log_dir: Path, lib: str, ml_framework: str) -> Path:
    """Train the shared 1-rank run of ``lib``/``ml_framework`` under ``log_dir``; its run directory."""
    command = [
        *ISLAB_TRAIN, "--lib", lib, "--ml-framework", ml_framework, "--device", "cpu", "--nproc", "1",
        "--num-envs", "64", "--max-iterations", "2", "--checkpoint-interval", "1", "--log-dir", str(log_dir),
        *ONE_RANK_OVERRIDES.get(lib, ()),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run_dir,) = log_dir.glob("*/*/*")
    return run_dir
