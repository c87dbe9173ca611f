"""Learning is real: one CPU rank lifts Cartpole's mean episode return (max ~300) from what the
untrained policy scores to >= 200 within a bounded budget, for each torch library path.

Both ends are measured the same way, on whole episodes: the library's deterministic policy plays
64 episodes to the end (``islab.policy.play.run_episodes``) before and after training. The
untrained policy must score < 100: an env in which any policy scores high (a pole that never
falls) fails here instead of passing as "learned"."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapters import TASK, build_adapter

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
