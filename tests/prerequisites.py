"""Skipping a test whose prerequisite is missing -- except in CI, where that is a failure.

On a developer's machine a test that needs jax, root, network namespaces or SLURM skips with the
reason. CI (``CI=true``) installs all of them (.ci/run: the [jax]/[onnx] extras, slurm-wlm, munge,
iproute2, and it runs as root), so there a missing prerequisite means the test would go untested
while CI stays green: it fails instead, with the same reason.

* :func:`require` -- inside a test or fixture: skip, or fail under CI.
* ``@pytest.mark.needs("jax", ...)`` -- modules a test needs (handled in conftest.py with
  :func:`missing_modules`).
* :data:`AS_ROOT_IN_CI` -- for what only root can set up (namespaces, SLURM daemons): CI as root
  must run it; CI without root (another CI) may skip.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
AS_ROOT_IN_CI = IN_CI and hasattr(os, "geteuid") and os.geteuid() == 0


def require(reason: str | None, *, in_ci: bool = IN_CI) -> None:
    """Nothing when ``reason`` is None; else skip with it, or -- when ``in_ci`` (default: CI=true)
    -- fail with it, so that CI cannot go green with the test untested."""
    if reason is None:
        return
    if in_ci:
        pytest.fail(f"{reason} -- CI installs this, so the test fails here instead of skipping", pytrace=False)
    pytest.skip(reason)


def missing_modules(*names: str) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def require_modules(*names: str) -> None:
    missing = missing_modules(*names)
    require(f"{', '.join(missing)} not installed (pip install -e '.[dev,jax,onnx,k8s-test]')" if missing else None)
