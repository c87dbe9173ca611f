"""``scripts/test_durations.py`` (docs/TESTING.md: where the suite's time goes, what a feature adds)
sums each test's setup, call and teardown, per folder, and compares with an earlier run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from paths import REPO

SCRIPT = REPO / "scripts" / "test_durations.py"


def _load():
    spec = importlib.util.spec_from_file_location("test_durations_script", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def junit(path: Path, cases: list[tuple[str, str, float]]) -> Path:
    body = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return path


def test_folders_and_the_slowest_tests(tmp_path: Path) -> None:
    durations = _load()
    now = junit(tmp_path / "now.xml", [
        ("tests.e2e.test_a", "test_slow", 30.0), ("tests.e2e.test_a", "test_slow", 2.0),  # setup + call
        ("tests.spec.test_b", "test_fast", 0.5), ("examples.external_task.tests.test_c", "test_x", 1.0),
    ])  # fmt: skip
    times = durations.test_times(now)
    assert times["tests/e2e/test_a.py::test_slow"] == 32.0
    assert durations.by_folder(times) == {"e2e": (32.0, 1), "spec": (0.5, 1), "examples": (1.0, 1)}
    before = junit(tmp_path / "before.xml", [("tests.e2e.test_a", "test_slow", 50.0)])
    done = subprocess.run([sys.executable, str(SCRIPT), str(now), "--before", str(before), "--top", "1"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "| e2e | 1 | 32 | 50 | -18 |" in done.stdout
    assert "| spec | 1 | 0 | 0 | +0 |" in done.stdout
    assert "- 32.0 s `tests/e2e/test_a.py::test_slow`" in done.stdout
    assert "test_fast" not in done.stdout.split("slowest tests")[1]  # --top 1
