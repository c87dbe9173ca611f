"""islab.policy.isaaclab_play without running anything: which play runs a run of Isaac Lab's trainer
(Isaac Lab 3: ``isaaclab play``; 2.x: the play.py beside its train.py), with which arguments, and the
options each kind of play refuses. The real plays are in tests/e2e/test_isaaclab_trainer.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import yaml

from islab.policy.isaaclab_play import isaaclab_run, play_argv
from islab.rundir.trainer_runs import record_trainer_run

ENTRY3 = "/venv/lib/python3.12/site-packages/isaaclab_rl/entrypoints/multigpu.py"


def _run(tmp_path: Path, script: str, args: list[str], lib: str = "rsl_rl") -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = {"lib": lib, "ml_framework": "torch", "isaaclab": "auto", "python": "/venv/bin/python",
            "entrypoint": {"script": script}, "args": args, "env": {"WARP_CACHE_PATH": "/cache"}}  # fmt: skip
    (run_dir / "launch.yaml").write_text(yaml.safe_dump({"spec": spec, "sources": {}}))
    folder = tmp_path / "logs" / lib / "cartpole" / "2026-01-01_00-00-00"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "model_7.pt", "w") as archive:
        archive.writestr("model_7/data.pkl", b"x")
    record_trainer_run(run_dir, folder, lib)
    return run_dir


def test_isaaclab3_runs_are_played_by_isaaclab_play_as_they_trained(tmp_path):
    stored = ["--rl_library", "rsl_rl", "--task", "Isaac-Cartpole", "--num_envs", "64", "--max_iterations", "3",
              "--device", "cpu", "agent.device=cpu", "physics=newton_mjwarp", "--checkpoint", "/old/m.pt"]  # fmt: skip
    run = isaaclab_run(_run(tmp_path, ENTRY3, stored))
    checkpoint = tmp_path / "logs" / "rsl_rl" / "cartpole" / "2026-01-01_00-00-00" / "model_7.pt"
    assert play_argv(run, checkpoint, num_envs=4, video=True, video_length=50) == [
        "/venv/bin/python", "-m", "isaaclab", "play", "--rl_library", "rsl_rl", "--task", "Isaac-Cartpole", "--device",
        "cpu", "agent.device=cpu", "physics=newton_mjwarp", "--num_envs", "4", "--video_length", "50", "--video",
        "--checkpoint", str(checkpoint),
    ]  # fmt: skip


def test_isaaclab_2x_runs_are_played_by_the_play_py_beside_their_train_py(tmp_path):
    script = "/IsaacLab/scripts/reinforcement_learning/skrl/train.py"
    stored = ["--task", "Isaac-Cartpole-v0", "--seed", "3", "--headless", "--distributed", "--ml_framework", "jax"]
    run = isaaclab_run(_run(tmp_path, script, stored, lib="skrl"))
    assert play_argv(run, Path("/c.pt"), device="cuda:0")[1:] == [
        "/IsaacLab/scripts/reinforcement_learning/skrl/play.py", "--task", "Isaac-Cartpole-v0", "--seed", "3",
        "--headless", "--ml_framework", "jax", "--device", "cuda:0", "--checkpoint", "/c.pt",
    ]  # fmt: skip


@pytest.mark.usefixtures("clean_environment")
def test_each_kind_of_play_refuses_the_others_options(islab, tmp_path):
    run_dir = str(_run(tmp_path, ENTRY3, ["--rl_library", "rl_games", "--task", "Isaac-Cartpole"], lib="rl_games"))
    for args, field in (
        (("play", run_dir, "--episodes", "5"), "--episodes"),
        (("play", run_dir, "--json"), "--json"),
        (("play", run_dir, "--checkpoint", "best"), "--checkpoint"),
        (("play", run_dir, "--seconds", "0"), "--seconds"),
        (("export", run_dir), "RUN_DIR"),  # Isaac Lab's rl_games play exports nothing
        (("play", run_dir, "--video", "--envs", "2"), "--envs"),  # islab's play tiles --envs (Isaac Lab's: --num-envs)
        (("play", str(tmp_path), "--seconds", "5"), "--seconds"),  # not a run of Isaac Lab's trainer
    ):
        code, out, err = islab(*args)
        assert code == 2 and err.startswith(f"error: {field}: ") and out == "", (args, err)
        assert len(err.strip().splitlines()) == 1, err
