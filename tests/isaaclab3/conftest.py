"""Fixtures of the Isaac Lab 3 tests (the venv and the job rules: isaaclab3_venv.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from isaaclab3_venv import ISAACLAB_PYTHON, require_isaaclab3


@pytest.fixture(scope="session")
def isaaclab_site() -> Path:
    """The folder that holds the installed ``isaaclab`` packages (asked of Isaac Lab's interpreter)."""
    require_isaaclab3()
    found = subprocess.run(
        [str(ISAACLAB_PYTHON), "-c", "import importlib.util as u; print(u.find_spec('isaaclab').origin)"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return Path(found.stdout.strip()).parent.parent
