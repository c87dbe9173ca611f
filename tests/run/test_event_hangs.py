"""islab.run.event_hangs: the hang watch of a trainer we did not write (Isaac Lab's train.py).

The slow test hangs the Isaac Lab fixture's rank for real under torchrun: its TensorBoard events stop,
islab-train dumps the rank's stacks through faulthandler (switched on in its environment, nothing of
ours inside the rank), names where it is stuck and stops the job.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from child_env import child_env
from paths import FIXTURES

from islab.plan.launch_plan import LaunchPlan, NodePlan, RankLaunch
from islab.run.event_hangs import FAULT_HANDLER_VARIABLE, rank_processes, with_fault_handler

TREE = FIXTURES / "isaaclab_tree"
ISAACLAB = ("--device", "cpu", "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0", "--num-envs", "8")


def test_ranks_are_the_topmost_processes_holding_a_rank_number(tmp_path):
    # a "rank" (RANK=3) whose own child inherits RANK=3, under a parent without one (torchrun's agent)
    script = textwrap.dedent("""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(os.getpid(), child.pid, flush=True)
        time.sleep(60)
    """)
    env = {**child_env("RANK"), "RANK": "3"}
    rank = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        rank_pid, grandchild = map(int, rank.stdout.readline().split())
        assert rank_processes({rank_pid, grandchild}) == {3: rank_pid}
    finally:
        rank.kill()
        rank.wait()


def test_ranks_start_with_faulthandler_on_unless_the_environment_says_otherwise():
    plan = LaunchPlan(
        launcher="skrl-jax", run_dir="r",
        nodes=(NodePlan(0, ("python",), {"A": "1"}, (RankLaunch(0, 0, ("python",), {"JAX_RANK": "0"}),)),),
    )  # fmt: skip
    on = with_fault_handler(plan, {})
    assert on.nodes[0].env == {FAULT_HANDLER_VARIABLE: "1", "A": "1"}
    assert on.nodes[0].ranks[0].env[FAULT_HANDLER_VARIABLE] == "1"
    assert with_fault_handler(plan, {FAULT_HANDLER_VARIABLE: ""}) == plan  # the user's choice stands


@pytest.mark.usefixtures("clean_environment")
def test_presets_are_watched_by_default_and_a_script_when_asked(islab):
    code, out, err = islab(*ISAACLAB, "--dry-run")
    assert code == 0, err
    assert re.search(r"hang_timeout_s\s+= 1800 .*chosen by the planner", out), out
    code, out, err = islab("--device", "cpu", "--script", "train.py", "--hang-timeout", "60", "--dry-run")
    assert code == 0 and re.search(r"hang_timeout_s\s+= 60 ", out), err
    code, out, err = islab("--device", "cpu", "--script", "train.py", "--dry-run")
    assert code == 0 and "hang_timeout_s" not in out, out  # a script of the user's: not by default


@pytest.mark.slow
def test_a_hung_isaaclab_trainer_dumps_its_stacks_is_named_and_stopped(tmp_path):
    # FIXTURE_WITHOUT_RECORD: as Isaac Lab 2.x's train.py, nothing in the rank switches faulthandler on
    hang = {"FIXTURE_HANG_RANK": "0", "FIXTURE_HANG_ITERATION": "2", "FIXTURE_WITHOUT_RECORD": "1"}
    env = child_env(("ISLAB_", "SLURM_", FAULT_HANDLER_VARIABLE)) | hang
    argv = [sys.executable, "-m", "islab.cli", "--log-dir", str(tmp_path / "runs"), *ISAACLAB,
            "--max-iterations", "50", "--hang-timeout", "4"]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: hang: the trainer's TensorBoard events showed no new iteration for 4 s"), error
    assert "the last was iteration 2" in error and "fixture_common.py:" in error and "in wait_for_peer" in error
    (log,) = (tmp_path / "runs").rglob("rank_0.log")
    text = log.read_text()
    assert "Fatal Python error: Aborted" in text and "wait_for_peer" in text  # the whole stack is there
    assert not list(Path(tmp_path).rglob("model_50.pt"))  # it did not train on
