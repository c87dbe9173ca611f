"""Fixtures shared by the launcher tests."""

from __future__ import annotations

import os

import pytest

from islab import cli


@pytest.fixture
def clean_environment(monkeypatch):
    """No ISLAB_* / SLURM_* / socket-interface settings from the developer's shell (the suite may
    itself run under srun), and a machine with no GPUs unless a test says so."""
    for name in list(os.environ):
        if name.startswith(("ISLAB_", "SLURM_")) or name.endswith("_SOCKET_IFNAME"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def islab(capsys):
    """Run the islab-train command line in-process: (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        code = cli.run(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


def pytest_runtest_setup(item):
    """``@pytest.mark.needs("jax", ...)``: skip without those modules -- fail under CI=true."""
    from prerequisites import require_modules

    for mark in item.iter_markers("needs"):
        require_modules(*mark.args)
