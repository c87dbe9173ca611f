"""A resume continues the curves: every rank's env state (mid-episode envs) and episode statistics
(the window of recent returns, the per-env running sums) are in the checkpoint, so the first mean
return reported after ``--resume`` is close to the last one before it. Without them the window starts
empty and the envs restart from a reset: 2-rank rsl_rl cartpole dropped from 120 to 6 (iteration
30 -> 31) although the policy was intact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from child_env import child_env
from test_resume import PATHS, build, in_process_skrl_ok

from islab import rundir
from islab.libs.base import LibraryAdapter
from islab.worker.checkpoint import load_checkpoint_for_rank, restore
from islab.worker.collectives import SingleProcess


def start_of_training(adapter: LibraryAdapter) -> torch.Tensor:
    """What the library's train() does before its first step, through its own code: the
    observations it starts from (rl_games: init_tensors, then env_reset; skrl: the trainer's reset;
    rsl_rl: get_observations, it never resets)."""
    if adapter.name == "rsl_rl":
        return adapter.vec_env.get_observations()["policy"]
    if adapter.name == "rl_games":
        adapter.agent.init_tensors()
        return adapter.agent.env_reset()["obs"]
    observations, _ = adapter.runner.trainer.env.reset()
    return torch.as_tensor(np.asarray(observations))


def observations_seen(adapter: LibraryAdapter) -> torch.Tensor:
    """The env's current observations as the library receives them (rl_games' wrapper clips)."""
    if adapter.name == "rl_games":
        return adapter.vec_env._obs(adapter.env._get_observations())["obs"]
    return adapter.env._get_observations()["policy"]


def running_returns(adapter: LibraryAdapter) -> torch.Tensor:
    """Each env's return so far in its episode under way, where the library sums it."""
    if adapter.name == "rsl_rl":
        return adapter.vec_env.returns.running
    if adapter.name == "rl_games":
        return adapter.agent.current_rewards.reshape(-1)
    return adapter.env.episode_return_buf  # skrl reads the env's own sums (extras["log"])


def reported_mean_return(adapter: LibraryAdapter) -> float | None:
    """The mean return the adapter reports for the next iteration if no episode ends in it."""
    if adapter.name == "rsl_rl":
        return adapter.vec_env.mean_return()
    if adapter.name == "rl_games":
        meter = adapter.agent.game_rewards
        return float(meter.get_mean()[0]) if meter.current_size > 0 else None
    return adapter.agent.mean_episode_return()


@pytest.mark.skipif(not in_process_skrl_ok, reason="importing skrl inside a distributed launch joins its group")
@pytest.mark.parametrize(("lib", "framework"), PATHS)
def test_a_restored_adapter_starts_training_where_the_saved_one_stopped(
    tmp_path: Path, lib: str, framework: str
) -> None:
    first = build(lib, framework, tmp_path / "first", seed=1)
    first.train(2)  # the checkpoint is written after the last rollout: first's envs are as saved
    saved_returns, saved_mean = running_returns(first).clone(), reported_mean_return(first)
    assert saved_mean is not None and bool(saved_returns.any()), "no episode ended or is under way: too short"
    expected_observations, expected_env = observations_seen(first).clone(), first.env.state_dict()

    second = build(lib, framework, tmp_path / "second", seed=7)
    checkpoint, _ = load_checkpoint_for_rank(SingleProcess(), tmp_path / "first")
    restore(second, checkpoint, rank=0)
    observations = start_of_training(second)

    assert torch.equal(torch.as_tensor(observations).cpu(), expected_observations.cpu()), "first observations"
    env = second.env.state_dict()
    for name in second.env.state_tensors:
        assert torch.equal(env[name], expected_env[name]), f"env state {name} after the library's first reset"
    assert torch.equal(running_returns(second).cpu(), saved_returns.cpu()), "running returns"
    assert reported_mean_return(second) == pytest.approx(saved_mean, rel=1e-6), "window of recent returns"


def islab_train(*args: str) -> None:
    env = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
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
