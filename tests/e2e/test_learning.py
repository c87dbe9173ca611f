"""Learning is real: one CPU rank lifts Cartpole's mean episode return (max ~300) from what the
untrained policy scores to >= 200 within a bounded budget, for each torch library path.

Both ends are measured the same way, on whole episodes: the library's deterministic policy plays
64 episodes to the end (``islab.policy.play.run_episodes``) before and after training. The
untrained policy must score < 100: an env in which any policy scores high (a pole that never
falls) fails here instead of passing as "learned". Then 2 CPU ranks of every library path
(skrl-JAX included) through the real launcher: rank 0's training episodes must reach >= 200."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from adapters import TASK, build_adapter
from child_env import child_env
from training_runs import check_two_ranks_hold_one_policy

from islab import rundir
from islab.envs import make_env
from islab.policy.play import run_episodes

BUDGETS = [
    # (lib, num_envs, iterations): ~0.4-1M env steps, 10-15 s each on 2 idle cores
    pytest.param("rsl_rl", 1024, 60, id="rsl_rl"),  # 16 steps per iteration
    pytest.param("rl_games", 1024, 60, id="rl_games"),  # 16 steps per epoch
    pytest.param("skrl", 512, 25, id="skrl-torch"),  # 32 rollouts per update
]
EPISODES = 64


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "num_envs", "iterations"), BUDGETS)
def test_single_rank_learns_cartpole(tmp_path: Path, lib: str, num_envs: int, iterations: int) -> None:
    adapter = build_adapter(lib, tmp_path / "run", num_envs=num_envs, seed=3)
    evaluation = make_env(TASK, EPISODES, "cpu", seed=11)

    def played() -> float:
        returns = run_episodes(evaluation, adapter.deterministic_actions, EPISODES, seed=11)["returns"]
        return sum(returns) / len(returns)

    untrained = played()
    result = adapter.train(iterations)
    trained = played()
    scores = f"untrained {untrained:.1f}, trained {trained:.1f}, training's last mean return {result.mean_return}"
    assert untrained < 100, f"the untrained policy already scores high: {scores}"
    assert result.mean_return is not None and result.mean_return >= 200, scores
    assert trained >= 200, scores


TWO_RANK_BUDGETS = [
    # (lib, framework, num_envs per rank, iterations): the single-rank budgets' samples per update,
    # split over 2 ranks whose gradients are averaged (rsl_rl, rl_games: 2 x 512; skrl: 2 x 256)
    pytest.param("rsl_rl", "torch", 512, 60, id="rsl_rl"),
    pytest.param("rl_games", "torch", 512, 60, id="rl_games"),
    pytest.param("skrl", "torch", 256, 25, id="skrl-torch"),
    pytest.param("skrl", "jax", 256, 25, id="skrl-jax", marks=pytest.mark.needs("jax")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "framework", "num_envs", "iterations"), TWO_RANK_BUDGETS)
def test_two_cpu_ranks_learn_cartpole(tmp_path: Path, lib: str, framework: str, num_envs: int, iterations: int) -> None:
    """The real launch (islab-train, 2 CPU ranks, gradients averaged across them) learns: rank 0's
    training episodes go from what an untrained policy scores (< 100, first iteration) to >= 200."""
    env = child_env(("ISLAB_", "RANK", "WORLD_SIZE", "JAX_PLATFORMS"))  # the suite's JAX cache stays
    env.update(ISLAB_THREADS_PER_RANK="1", CUDA_VISIBLE_DEVICES="")
    command = [
        sys.executable, "-m", "islab.cli", "--lib", lib, "--ml-framework", framework, "--device", "cpu",
        "--nproc", "2", "--num-envs", str(num_envs), "--max-iterations", str(iterations), "--seed", "3",
        "--log-dir", str(tmp_path / "logs"), "--run-name", "learn",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (summary_path,) = (tmp_path / "logs").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    progress = rundir.read_progress(summary_path.parent)
    returns = [record["mean_return"] for record in progress if record.get("mean_return") is not None]
    scores = f"first {returns[:1]}, last {returns[-1:]}, summary {summary['mean_return']} ({summary['wall_s']:.0f} s)"
    print(f"{lib}-{framework}: {scores}")
    assert summary["world_size"] == 2 and summary["iterations"] == iterations
    assert returns and returns[0] < 100, f"the untrained policy already scores high: {scores}"
    assert summary["mean_return"] is not None and summary["mean_return"] >= 200, scores
    check_two_ranks_hold_one_policy(summary_path.parent, done.stdout + done.stderr, iterations, framework)
