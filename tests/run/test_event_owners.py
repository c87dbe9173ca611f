"""islab.run.event_owners: a job reads its own TensorBoard events, not those of another job writing
under the same folder (two Isaac Lab runs started from one working directory).

The unit tests use real processes holding real files open; the slow test runs two islab-train
launches of the Isaac Lab fixture at once, in one working directory, through real torchrun, and
checks that each reports its own rewards (told apart by FIXTURE_REWARD_OFFSET).
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_env import child_env
from paths import FIXTURES

from islab.run.event_owners import JobEventFiles

HOLD = "import sys, time; handle = open(sys.argv[1], 'ab'); print('open', flush=True); time.sleep(60)"


def _holding(path: Path) -> subprocess.Popen:
    """A process that keeps ``path`` open (as a writer keeps its event file open while it trains)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "open"
    return process


def test_a_file_one_of_the_jobs_processes_holds_open_is_the_jobs(tmp_path):
    root = tmp_path / "logs" / "rl_games"
    ours = root / "a" / "summaries" / "events.out.tfevents.1795000000.host"  # tensorboardX: no pid in the name
    theirs = root / "b" / "summaries" / "events.out.tfevents.1795000001.host"
    writers = [_holding(ours), _holding(theirs)]
    try:
        files = JobEventFiles(root)
        files.observe({writers[0].pid})
        assert files.owns(ours) and not files.owns(theirs)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    assert files.owns(ours)  # still, once its writer is gone


def test_a_file_named_with_a_pid_the_job_had_is_the_jobs_after_it_was_closed(tmp_path):
    host = socket.gethostname()
    files = JobEventFiles(tmp_path, host=host)
    files.observe({4242})
    assert files.owns(tmp_path / f"events.out.tfevents.1795000000.{host}.4242.0")  # torch's SummaryWriter
    assert not files.owns(tmp_path / f"events.out.tfevents.1795000000.{host}.4343.0")
    assert not files.owns(tmp_path / "events.out.tfevents.1795000000.other-host.4242.0")


TREE = FIXTURES / "isaaclab_tree"


def _start(cwd: Path, *, offset: int, iterations: int, pause: float) -> subprocess.Popen:
    env = child_env(("ISLAB_", "SLURM_")) | {
        "FIXTURE_REWARD_OFFSET": str(offset),
        "FIXTURE_ITERATION_SLEEP": str(pause),
    }
    argv = [sys.executable, "-m", "islab.cli", "--log-dir", str(cwd / "runs" / str(offset)), "--device", "cpu",
            "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0", "--num-envs", "8",
            "--max-iterations", str(iterations)]  # fmt: skip
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _summary(stdout: str) -> dict[str, str]:
    """The end-of-run table's rows: {label: value}."""
    rows = [line.split("│") for line in stdout.splitlines() if line.count("│") == 3]
    return {cells[1].strip(): cells[2].strip() for cells in rows}


@pytest.mark.slow
def test_two_isaaclab_runs_in_one_directory_each_report_their_own_rewards(tmp_path):
    """A long run (rewards offset by 1000) writes under logs/rsl_rl while a short one starts, trains
    and ends there: reading "the newest event file" made the short one show the long one's numbers
    (live, and at its end, when the long one's file is the newest)."""
    long = _start(tmp_path, offset=1000, iterations=100_000, pause=0.05)
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "logs" / "rsl_rl").rglob("*tfevents*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        short = _start(tmp_path, offset=0, iterations=8, pause=0.2)
        out, err = short.communicate(timeout=300)
        assert short.returncode == 0, err[-3000:]
        assert long.poll() is None  # it wrote all along
    finally:
        long.send_signal(signal.SIGINT)
        long.communicate(timeout=60)
    (log,) = (tmp_path / "runs" / "0").rglob("rank_0.log")
    rewards = [float(value) for value in re.findall(r"iteration \d+/\d+ mean reward (-?[\d.]+)", log.read_text())]
    summary = _summary(out)
    assert summary["iterations"] == "8", summary
    assert float(summary["mean return"]) == pytest.approx(rewards[-1], abs=0.01), summary
    shown = [float(value) for value in re.findall(r"mean return (-?[\d.]+)", out)]
    assert shown and max(shown) < 500, out  # not one of the long run's numbers, live either
