"""The rl_games adapter in-process, one rank on CPU: results, checkpoints, round trips, learning;
and the normalizer synchronization with two real gloo ranks."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from adapters import TASK, build_adapter
from rl_games.algos_torch.running_mean_std import RunningMeanStd

from islab.envs import make_env
from islab.libs import load_adapter
from islab.libs.rl_games import (
    GlobalRunningMeanStd,
    RlGamesAdapter,
    RlGamesVecEnv,
    fit_minibatch_size,
    use_global_normalizers,
)


def build(run_dir: Path, num_envs: int = 16, seed: int = 0, overrides: tuple[str, ...] = ()) -> RlGamesAdapter:
    return build_adapter("rl_games", run_dir, num_envs=num_envs, seed=seed, overrides=overrides)


def test_registry_loads_this_adapter() -> None:
    assert load_adapter("rl_games") is RlGamesAdapter


def test_fit_minibatch_size() -> None:
    assert fit_minibatch_size(4096, 16 * 1024) == 4096  # divides: unchanged
    assert fit_minibatch_size(16384, 16 * 512) == 8192  # larger than the batch: one minibatch
    assert fit_minibatch_size(4096, 16 * 100) == 1600
    assert fit_minibatch_size(1000, 16 * 100) == 800  # largest divisor below the request


def test_vec_env_matches_rl_games_contract() -> None:
    env = make_env(TASK, 4, "cpu", seed=0)
    vec_env = RlGamesVecEnv(env, clip_obs=5.0, clip_actions=1.0)
    info = vec_env.get_env_info()
    assert info["observation_space"].shape == (4,) and info["action_space"].shape == (1,)
    assert info["action_space"].high.tolist() == [1.0]  # finite: rl_games rescales [-1, 1] onto it
    assert vec_env.reset()["obs"].shape == (4, 4)
    env.episode_length_buf[:] = env.max_episode_length - 2
    obs, rewards, dones, infos = vec_env.step(torch.full((4, 1), 7.0))  # clamped to 1.0: 100 N
    assert obs["obs"].abs().max() <= 5.0
    assert rewards.shape == (4,) and dones.dtype == torch.long and dones.all()
    assert infos["time_outs"].all()


def test_train_returns_result_and_writes_rank0_outputs(tmp_path: Path) -> None:
    adapter = build(tmp_path / "run", num_envs=16)
    assert adapter.agent.minibatch_size == 256  # 4096 fitted to 16 envs x 16 steps
    result = adapter.train(2)
    assert result.iterations == 2
    assert result.env_steps == 16 * 16 * 2  # num_envs * horizon_length * iterations * world_size
    assert result.wall_s > 0
    assert result.mean_return is not None and math.isfinite(result.mean_return)
    assert result.checkpoint is not None and Path(result.checkpoint).parent == tmp_path / "run" / "nn"
    assert list((tmp_path / "run" / "summaries").glob("events.out.tfevents.*"))


def test_checkpoint_loads_weights_only_and_holds_the_policy(tmp_path: Path) -> None:
    adapter = build(tmp_path / "run")
    result = adapter.train(1)
    checkpoint = torch.load(result.checkpoint, weights_only=True)
    assert checkpoint["epoch"] == 1 and isinstance(checkpoint["last_mean_rewards"], float)
    assert "optimizer" in checkpoint
    policy = adapter.policy_state()
    assert "running_mean_std.running_mean" in policy and "value_mean_std.running_var" in policy
    assert policy.keys() == checkpoint["model"].keys()
    assert all(torch.equal(checkpoint["model"][key], value) for key, value in policy.items())


def test_save_load_round_trips_policy_state(tmp_path: Path) -> None:
    trained = build(tmp_path / "a", seed=1)
    trained.train(1)
    path = tmp_path / "policy.pth"
    trained.save(path)
    other = build(tmp_path / "b", seed=2)
    assert any(not torch.equal(other.policy_state()[key], value) for key, value in trained.policy_state().items())
    other.load(path)
    after = other.policy_state()
    assert after.keys() == trained.policy_state().keys()
    assert all(torch.equal(after[key], value) for key, value in trained.policy_state().items())


def test_agent_normalizers_are_found_for_replacement(tmp_path: Path) -> None:
    """Both of rl_games' normalizers (observations, values) are found inside the built model."""
    model = build(tmp_path / "run").agent.model
    before = {key: value.clone() for key, value in model.state_dict().items()}
    assert use_global_normalizers(model) == 2
    assert isinstance(model.running_mean_std, GlobalRunningMeanStd)
    assert isinstance(model.value_mean_std, GlobalRunningMeanStd)
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())


def test_agent_trains_with_global_normalizers_in_a_one_rank_group(tmp_path: Path) -> None:
    """The swapped-in normalizers are the ones training updates (obs and value statistics)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        adapter = build(tmp_path / "run", num_envs=16)
        adapter.agent.use_global_normalizers()
        adapter.train(1)
    finally:
        dist.destroy_process_group()
    model = adapter.agent.model
    assert adapter.agent.value_mean_std is model.value_mean_std
    # count starts at 1; each update adds the batch size (observations: once per minibatch).
    assert float(model.running_mean_std.count) > 1 and float(model.value_mean_std.count) > 1


def _batch(generator: torch.Generator, rank: int) -> torch.Tensor:
    """Different data on each rank, a different scale per feature."""
    return torch.randn(64, 3, generator=generator) * torch.tensor([1.0, 10.0, 0.1]) + rank


def _normalizer_rank(rank: int, store: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        # Scripted, as rl_games builds its normalizers.
        model = torch.nn.Sequential(torch.jit.script(RunningMeanStd((3,))), torch.nn.Linear(3, 1))
        assert use_global_normalizers(model) == 1
        normalizer = model[0]
        assert isinstance(normalizer, GlobalRunningMeanStd)
        generator = torch.Generator().manual_seed(rank)
        for _ in range(3):
            normalizer(_batch(generator, rank))
        results[rank] = {key: value.clone() for key, value in normalizer.state_dict().items()}
    finally:
        dist.destroy_process_group()


def test_global_normalizer_is_identical_across_ranks_and_combines_all_data(tmp_path: Path) -> None:
    store = tmp_path / "store"  # a file store: no port probed here and bound later by a child
    results = mp.Manager().dict()
    # fork: the children need nothing re-imported (spawn would re-import rl_games, seconds each).
    mp.start_processes(_normalizer_rank, args=(str(store), results), nprocs=2, join=True, start_method="fork")
    rank0, rank1 = results[0], results[1]
    assert all(torch.equal(rank0[key], rank1[key]) for key in rank0), "ranks must hold the same bits"

    # The same three updates, each on both ranks' batches at once, in a plain RunningMeanStd.
    reference = RunningMeanStd((3,))
    generators = [torch.Generator().manual_seed(rank) for rank in (0, 1)]
    for _ in range(3):
        reference(torch.cat([_batch(generator, rank) for rank, generator in enumerate(generators)]))
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(rank0[key], value, rtol=1e-6, atol=1e-7)  # float32 batch moments


def test_the_best_reward_survives_a_resume(tmp_path: Path) -> None:
    """rl_games' train() forgets the best mean reward; a resumed run must go on from the restored
    one, or its first epoch would count as "best" and overwrite the best checkpoint."""
    first = build(tmp_path / "first", num_envs=16)
    first.train(1)
    state = first.library_state()
    state["last_mean_rewards"] = 1.0e6  # a best no Cartpole epoch can beat
    second = build(tmp_path / "second", num_envs=16, seed=3)
    second.load_library_state(state)
    second.train(1)
    assert second.library_state()["last_mean_rewards"] == 1.0e6
