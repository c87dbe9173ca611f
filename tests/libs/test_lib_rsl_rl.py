"""The rsl_rl adapter in-process, one rank on CPU: results, checkpoints, round trips, learning."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from adapters import TASK, build_adapter

from islab.envs import make_env
from islab.envs.base import EPISODES_ENDED
from islab.libs import load_adapter
from islab.libs.rsl_rl import RslRlAdapter, RslRlVecEnv


def build(run_dir: Path, num_envs: int = 16, seed: int = 0, overrides: tuple[str, ...] = ()) -> RslRlAdapter:
    return build_adapter("rsl_rl", run_dir, num_envs=num_envs, seed=seed, overrides=overrides)


def test_registry_loads_this_adapter() -> None:
    assert load_adapter("rsl_rl") is RslRlAdapter


def test_vec_env_matches_rsl_rl_contract() -> None:
    env = make_env(TASK, 4, "cpu", seed=0)
    vec_env = RslRlVecEnv(env)
    assert (vec_env.num_envs, vec_env.num_actions) == (4, 1)
    assert vec_env.get_observations()["policy"].shape == (4, 4)
    vec_env.episode_length_buf = torch.full((4,), env.max_episode_length - 2)
    assert env.episode_length_buf.tolist() == [env.max_episode_length - 2] * 4  # setter reaches the env
    obs, rewards, dones, extras = vec_env.step(torch.zeros(4, 1))
    assert obs["policy"].shape == (4, 4) and rewards.shape == (4,)
    assert dones.dtype == torch.long and dones.all()  # every env hit the time limit
    assert extras["time_outs"].all()
    assert vec_env.mean_return() == pytest.approx(rewards.sum().item() / 4)  # four one-step episodes ended


def test_train_returns_result_and_writes_rank0_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # rsl_rl itself would read WORLD_SIZE from the environment; the adapter must use the context.
    monkeypatch.setenv("WORLD_SIZE", "2")
    adapter = build(tmp_path / "run", num_envs=16)
    result = adapter.train(2)
    assert adapter.runner.is_distributed is False
    assert result.iterations == 2
    assert result.env_steps == 16 * 16 * 2  # num_envs * num_steps_per_env * iterations * world_size
    assert result.wall_s > 0
    assert result.mean_return is not None and math.isfinite(result.mean_return)
    assert result.checkpoint == str(tmp_path / "run" / "model_1.pt")
    assert list((tmp_path / "run").glob("events.out.tfevents.*")), "rank 0 writes TensorBoard events"


def test_checkpoint_loads_weights_only_and_holds_the_policy(tmp_path: Path) -> None:
    adapter = build(tmp_path / "run")
    result = adapter.train(1)
    checkpoint = torch.load(result.checkpoint, weights_only=True)
    assert checkpoint["iter"] == 0
    assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict"} <= set(checkpoint)
    for key, value in adapter.policy_state().items():
        assert torch.equal(checkpoint["actor_state_dict"][key.removeprefix("actor.")], value)


def test_save_load_round_trips_policy_state(tmp_path: Path) -> None:
    trained = build(tmp_path / "a", seed=1)
    trained.train(1)
    path = tmp_path / "policy.pt"
    trained.save(path)
    other = build(tmp_path / "b", seed=2)
    before = other.policy_state()
    assert any(not torch.equal(before[key], value) for key, value in trained.policy_state().items())
    other.load(path)
    after = other.policy_state()
    assert after.keys() == trained.policy_state().keys()
    assert all(torch.equal(after[key], value) for key, value in trained.policy_state().items())


def test_policy_state_includes_observation_normalizer(tmp_path: Path) -> None:
    adapter = build(tmp_path / "run", overrides=("actor.obs_normalization=true",))
    adapter.train(1)
    state = adapter.policy_state()
    assert {"actor.obs_normalizer._mean", "actor.obs_normalizer._var", "actor.obs_normalizer.count"} <= set(state)
    assert int(state["actor.obs_normalizer.count"]) == 16 * 16  # one rollout's observations


def _logger(num_envs: int) -> Any:
    from rsl_rl.utils.logger import Logger

    logger = Logger(None, {"algorithm": {"rnd_cfg": None}}, {}, num_envs, False, 1, 0, "cpu")  # 5.4.2 indexes rnd_cfg
    logger.writer = object()  # the logging rank (any writer: only checked for None per step)
    return logger


def test_deferred_logger_keeps_rsl_rls_statistics_without_per_step_reads() -> None:
    """The same steps into rsl_rl's own Logger and into one with ``defer_host_reads``: after the
    once-per-iteration flush both hold the same last returns and lengths, and the log's means over
    the steps where episodes ended (what rsl_rl's stock logger averaged when envs logged only then)."""
    from islab.libs.rsl_rl_deferred import DeferredEpisodeLog

    stock, deferred_logger = _logger(8), _logger(8)
    deferred = DeferredEpisodeLog(deferred_logger)
    generator = torch.Generator().manual_seed(0)
    for step in range(150):  # more than 100 episodes end: the windows wrap
        rewards = torch.rand(8, generator=generator)
        dones = (torch.rand(8, generator=generator) < 0.3).long()
        ended = dones.sum()
        log = {"episode_return": torch.rand((), generator=generator) * (ended > 0), "steps": step * (ended > 0)}
        if int(ended) > 0:  # what an env that logs only when episodes end gives the stock logger
            stock.process_env_step(rewards, dones, {"log": dict(log)})
        else:
            stock.process_env_step(rewards, dones, {})
        deferred.process_env_step(rewards, dones, {"log": log, EPISODES_ENDED: ended})
    deferred.flush()
    assert sorted(deferred_logger.rewbuffer) == pytest.approx(sorted(stock.rewbuffer))
    assert sorted(deferred_logger.lenbuffer) == sorted(stock.lenbuffer) and len(stock.lenbuffer) == 100
    for key in ("episode_return", "steps"):
        expected = torch.cat([torch.as_tensor(entry[key]).float().reshape(1) for entry in stock.ep_extras]).mean()
        assert float(deferred_logger.ep_extras[-1][key]) == pytest.approx(float(expected), rel=1e-5)


def test_deferred_nan_check_raises_at_the_iterations_end() -> None:
    from islab.libs.rsl_rl_deferred import DeferredNanCheck

    check = DeferredNanCheck()
    obs = {"policy": torch.zeros(4, 2)}
    check.observe(obs, torch.zeros(4), torch.zeros(4, dtype=torch.long))
    check.check()  # nothing: no NaN
    check.observe(obs, torch.tensor([0.0, float("nan"), 0.0, 0.0]), torch.zeros(4, dtype=torch.long))
    check.observe(obs, torch.zeros(4), torch.zeros(4, dtype=torch.long))  # a NaN stays seen
    with pytest.raises(ValueError, match="rewards returned by the environment contained NaN"):
        check.check()
    check.check()  # cleared after the check
