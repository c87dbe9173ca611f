"""Fixtures shared by the launcher tests."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from child_env import SUITE_SETTINGS

from islab import cli

# One JAX compilation cache for the whole session, inherited by every rank the tests start: the
# skrl-JAX tests compile the same programs again and again (a 2-iteration run: ~17 s cold, ~6 s
# warm on a 2-core machine). A per-session directory keeps runs independent of each other;
# pytest-xdist's workers inherit the controller's (one cache for both workers), and the process
# that made it removes it at exit.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="islab-tests-jax-cache-")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# The suite's settings (the pre-flight off for tests about something else: tests/child_env.py) hold
# for in-process runs too, and for processes started with this environment.
os.environ.update(SUITE_SETTINGS)


@pytest.fixture
def clean_environment(monkeypatch):
    """No ISLAB_* / SLURM_* / socket-interface settings from the developer's shell (the suite may
    itself run under srun), and a machine with no GPUs unless a test says so."""
    for name in list(os.environ):
        if name.startswith(("ISLAB_", "SLURM_")) or name.endswith("_SOCKET_IFNAME"):
            monkeypatch.delenv(name)
    for name, value in SUITE_SETTINGS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def islab(capsys):
    """Run the islab-train command line in-process: (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        code = cli.run(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.fixture(scope="session")
def one_rank_run(tmp_path_factory):
    """``one_rank_run(lib, ml_framework)``: the run directory of the session's one tiny 1-rank run of
    that library path (tests/training_runs.py), trained on first use, shared by the tests that only
    read it."""
    from training_runs import train_one_rank

    runs: dict[tuple[str, str], object] = {}

    def get(lib: str, ml_framework: str = "torch"):
        if (lib, ml_framework) not in runs:
            runs[lib, ml_framework] = train_one_rank(
                tmp_path_factory.mktemp(f"run-{lib}-{ml_framework}"), lib, ml_framework
            )
        return runs[lib, ml_framework]

    return get


def pytest_collection_modifyitems(config, items):
    """Slow tests first (a stable sort: each group keeps its order). Under pytest-xdist
    (scripts/test.sh runs two workers) the minutes-long launches then start while the fast tests fill
    the gaps, instead of one of them arriving last and running alone on a finished suite."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item):
    """``@pytest.mark.needs("jax", ...)``: skip without those modules -- fail under CI=true."""
    from prerequisites import require_modules

    for mark in item.iter_markers("needs"):
        require_modules(*mark.args)
