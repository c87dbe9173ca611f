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
