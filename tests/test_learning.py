"""Learning is real: one CPU rank lifts Cartpole's mean episode return (max ~300) from its starting
value to >= 200 within a bounded budget, for each torch library path."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapters import build_adapter

BUDGETS = [
    # (lib, num_envs, iterations): ~0.4-1M env steps, 10-15 s each on 2 idle cores
    pytest.param("rsl_rl", 1024, 60, id="rsl_rl"),  # 16 steps per iteration
    pytest.param("rl_games", 1024, 60, id="rl_games"),  # 16 steps per epoch
    pytest.param("skrl", 512, 25, id="skrl-torch"),  # 32 rollouts per update
]


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "num_envs", "iterations"), BUDGETS)
def test_single_rank_learns_cartpole(tmp_path: Path, lib: str, num_envs: int, iterations: int) -> None:
    start = build_adapter(lib, tmp_path / "start", num_envs=num_envs, seed=3).train(1).mean_return
    result = build_adapter(lib, tmp_path / "run", num_envs=num_envs, seed=3).train(iterations)
    assert start is not None and start < 100
    assert result.mean_return is not None and result.mean_return >= 200, (start, result)
