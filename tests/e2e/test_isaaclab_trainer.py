"""islab's features for Isaac Lab's own trainer, for real: the Isaac Lab fixture (Isaac Lab 2.x's
argument surface, checkpoints and resume options; tests/fixtures/isaaclab_tree) under real torchrun,
through islab-train as a user runs it.

One run serves the module: it is preempted (SIGTERM to islab-train, as SLURM sends it), then resumed
by its run directory alone; play and export read the checkpoints it left.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from child_env import child_env
from paths import FIXTURES

from islab.rundir.trainer_runs import trainer_runs

pytestmark = pytest.mark.slow

TREE = FIXTURES / "isaaclab_tree"
ITERATIONS = 40
SAVE_INTERVAL = 5
STOP_AFTER = 13  # iterations trained when SIGTERM comes: the newest checkpoint is then model_10


def islab_train(cwd: Path, *args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "islab.cli", *args], cwd=cwd, env=env or child_env(("ISLAB_", "SLURM_")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip


def finished(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Its output once it ended; killed (with what it started) when it did not end in time."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        raise


def rank_log(run_dir: Path) -> str:
    path = run_dir / "logs" / "rank_0.log"
    return path.read_text() if path.is_file() else ""


@dataclass
class Preempted:
    cwd: Path
    run_dir: Path
    stopped: subprocess.CompletedProcess
    left_behind: list[str]
    resumed: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def preempted(tmp_path_factory) -> Preempted:
    cwd = tmp_path_factory.mktemp("isaaclab-run")
    env = child_env(("ISLAB_", "SLURM_")) | {"FIXTURE_ITERATION_SLEEP": "0.2"}
    train = islab_train(cwd, "--log-dir", "runs", "--device", "cpu", "--isaaclab", str(TREE), "--task",
                        "Isaac-Cartpole-v0", "--num-envs", "8", "--max-iterations", str(ITERATIONS), "--",
                        f"agent.save_interval={SAVE_INTERVAL}", env=env)  # fmt: skip
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for child in psutil.Process(train.pid).children(recursive=True):
            seen.setdefault(child.pid, child)
        runs = list((cwd / "runs").glob("*/*/*"))
        if runs and f"iteration {STOP_AFTER}/" in rank_log(runs[0]):
            break
        time.sleep(0.1)
    train.send_signal(signal.SIGTERM)
    out, err = finished(train, 120)
    stopped = subprocess.CompletedProcess(train.args, train.returncode, out, err)
    left = [
        " ".join(process.cmdline())
        for process in seen.values()
        if process.is_running() and process.status() != "zombie"
    ]
    (run_dir,) = list((cwd / "runs").glob("*/*/*"))
    resume = islab_train(cwd, "--resume", str(run_dir), env=env)
    out, err = finished(resume, 300)
    return Preempted(cwd, run_dir, stopped, left, subprocess.CompletedProcess(resume.args, resume.returncode, out, err))


def test_sigterm_stops_isaaclab_cleanly_and_resume_run_dir_goes_on_from_its_newest_checkpoint(preempted):
    stopped, run_dir = preempted.stopped, preempted.run_dir
    assert stopped.returncode == 75, stopped.stderr[-3000:]  # preempted, resumable
    first = Path(trainer_runs(run_dir)[0]["folder"])
    newest = first / f"model_{(STOP_AFTER // SAVE_INTERVAL) * SAVE_INTERVAL}.pt"
    assert (
        f"islab-train: preempted by SIGTERM: Isaac Lab's trainer ended on SIGINT; its newest checkpoint is {newest}"
        in stopped.stderr
    )
    assert f"islab-train --resume {run_dir}" in stopped.stderr
    log = rank_log(run_dir)
    assert "interrupted; stopping without a final checkpoint" in log  # the trainer's own Ctrl-C path ran
    assert "Traceback" not in log
    assert not preempted.left_behind, preempted.left_behind

    resumed = preempted.resumed
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"[INFO]: Loading model checkpoint from: {newest}" in rank_log(run_dir)  # Isaac Lab 2.x's --resume options
    after = rank_log(run_dir).split("Loading model checkpoint from")[1]
    iterations = [int(value) for value in re.findall(r"iteration (\d+)/\d+ mean", after)]
    assert iterations == list(range(newest_number(newest) + 1, ITERATIONS + 1))  # on from it, to the run's target
    folders = [Path(record["folder"]) for record in trainer_runs(run_dir)]
    assert len(folders) == 2 and (folders[1] / f"model_{ITERATIONS}.pt").is_file()  # Isaac Lab's new run folder
    assert re.search(rf"iterations\s+│ {ITERATIONS} ", resumed.stdout), resumed.stdout


def newest_number(path: Path) -> int:
    return int(re.search(r"model_(\d+)", path.name).group(1))


def test_a_resume_with_nothing_left_or_a_changed_task_is_refused(preempted, islab, monkeypatch):
    monkeypatch.chdir(preempted.cwd)  # where the run started: Isaac Lab 2.x's rsl_rl resumes from ./logs
    run_dir = str(preempted.run_dir)
    for args, words in (
        (("--resume", run_dir), "has reached its 40 iterations"),
        (("--resume", run_dir, "--task", "Isaac-Cartpole-Direct-v0"), "keeps its task"),
    ):
        code, out, err = islab(*args, "--dry-run")
        assert code == 2 and words in err and out == "", err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    code, out, err = islab("--resume", run_dir, "--max-iterations", "5", "--dry-run", "--json")
    argv = json.loads(out)["nodes"][0]["argv"]
    assert argv[argv.index("--max_iterations") + 1] == "5" and argv[argv.index("--checkpoint") + 1] == "model_40\\.pt$"


def test_play_runs_isaaclab_s_play_of_the_newest_checkpoint_with_a_video_or_for_some_seconds(preempted):
    newest = Path(trainer_runs(preempted.run_dir)[-1]["folder"]) / f"model_{ITERATIONS}.pt"
    play = islab_train(preempted.cwd, "play", str(preempted.run_dir), "--video", "--video-length", "60")
    out, err = finished(play, 120)
    assert play.returncode == 0, err[-3000:]
    command = shlex.split(err.split(": ", 2)[2].splitlines()[0])  # the command islab-train printed
    assert command[1] == str(TREE / "scripts" / "reinforcement_learning" / "rsl_rl" / "play.py")
    # as the training ran: its task, device and Hydra override; then the checkpoint and the video
    assert command[2:] == ["--task", "Isaac-Cartpole-v0", "--headless", "--device", "cpu",
                           f"agent.save_interval={SAVE_INTERVAL}", "--video_length", "60", "--video",
                           "--checkpoint", str(newest)]  # fmt: skip
    assert (newest.parent / "videos" / "play" / "rl-video-step-0.mp4").read_text() == "fixture video: 60 frames\n"

    play = islab_train(preempted.cwd, "play", str(preempted.run_dir), "--seconds", "3")
    out, err = finished(play, 120)
    assert play.returncode == 0 and "islab-train: stopped Isaac Lab's play after 3 s" in err, err[-3000:]
    assert f"[INFO]: Loading model checkpoint from: {newest}" in out  # it played, then ended on our SIGINT


def test_export_runs_isaaclab_s_rsl_rl_play_until_it_has_exported_the_checkpoint_s_policy(preempted):
    import onnxruntime
    import torch

    newest = Path(trainer_runs(preempted.run_dir)[-1]["folder"]) / f"model_{ITERATIONS}.pt"
    export = islab_train(preempted.cwd, "export", str(preempted.run_dir))
    out, err = finished(export, 120)
    assert export.returncode == 0, err[-3000:]
    folder = newest.parent / "exported"
    assert f"islab-train: exported {folder / 'policy.pt'}, {folder / 'policy.onnx'}" in out
    weight, bias, _ = torch.load(newest, weights_only=True)["params"]
    obs = torch.randn(5, weight.shape[1])
    expected = (obs @ weight.T + bias).detach()
    assert torch.allclose(torch.jit.load(str(folder / "policy.pt"))(obs), expected, atol=1e-5)
    session = onnxruntime.InferenceSession(str(folder / "policy.onnx"))  # a batch of one, as Isaac Lab exports it
    (actions,) = session.run(["actions"], {"obs": obs[:1].numpy()})
    assert torch.allclose(torch.from_numpy(actions), expected[:1], atol=1e-5)
