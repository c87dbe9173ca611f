"""A resume continues the curves: every rank's env state (mid-episode envs) and episode statistics
(the window of recent returns, the per-env running sums) are in the checkpoint, so the first mean
return reported after ``--resume`` is close to the last one before it. Without them the window starts
empty and the envs restart from a reset: 2-rank rsl_rl cartpole dropped from 120 to 6 (iteration
30 -> 31) although the policy was intact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from islab import rundir


def islab_train(*args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ISLAB_", "RANK", "WORLD_SIZE"))}
    result = subprocess.run(
        [sys.executable, "-m", "islab.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.slow
def test_the_mean_return_goes_on_after_a_resume(tmp_path: Path) -> None:
    islab_train(
        "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "64", "--max-iterations", "20",
        "--log-dir", str(tmp_path), "--run-name", "curves",
    )  # fmt: skip
    (run_dir,) = tmp_path.glob("rsl_rl/*/*_curves")
    islab_train("--resume", str(run_dir), "--max-iterations", "2")
    returns = {record["iteration"]: record["mean_return"] for record in rundir.read_progress(run_dir)}
    before, after = returns[20], returns[21]
    assert before > 20, f"the run learned too little to tell a drop: {returns}"
    assert after >= before / 2, f"mean return fell from {before:.1f} to {after:.1f} across the resume"
