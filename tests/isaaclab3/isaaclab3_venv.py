"""The real Isaac Lab 3.0, installed in ``.venv-isaaclab`` (``ISLAB_EXTRAS=isaaclab bash scripts/setup.sh``:
Python 3.12, isaaclab 3.0.0 with skrl and rl_games): CI's isaaclab job (``ISLAB_TEST_JOB=isaaclab
scripts/test.sh``) runs these tests with islab-train from ``.venv`` and Isaac Lab's ranks in
``.venv-isaaclab`` (``--python``). In that job a missing venv fails them; the main and mjlab jobs
leave them to it; on a developer's machine without the venv they skip.
"""

from __future__ import annotations

import os

import pytest
from paths import REPO
from prerequisites import require

ISAACLAB_PYTHON = REPO / ".venv-isaaclab" / "bin" / "python"
JOB = os.environ.get("ISLAB_TEST_JOB")


def require_isaaclab3() -> None:
    """Skip outside the isaaclab job when another job runs; fail inside it when the venv is missing."""
    if JOB not in (None, "", "isaaclab"):
        pytest.skip(f"Isaac Lab 3 runs in CI's isaaclab job, not in the {JOB} job (ISLAB_TEST_JOB=isaaclab)")
    setup = "ISLAB_EXTRAS=isaaclab bash scripts/setup.sh"
    missing = None if ISAACLAB_PYTHON.exists() else f"{ISAACLAB_PYTHON} is missing: {setup}"
    require(missing, in_ci=JOB == "isaaclab" or os.environ.get("CI", "").lower() in ("1", "true", "yes"))
