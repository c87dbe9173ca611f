"""An env's ``state_dict`` restores it exactly: step, save, step more; a fresh env that loads the state
(and the RNG stream, which the checkpoint saves beside it) returns the same observations, rewards and
dones, resets included."""

from __future__ import annotations

import io

import pytest
import torch

from islab.envs import make_env

TASKS = ["Islab-Cartpole-v0", "Islab-Quadcopter-v0"]
NUM_ENVS = 32


def actions(env, steps: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(NUM_ENVS, *env.single_action_space.shape, generator=generator) * 2 - 1 for _ in range(steps)]


def roll(env, plan: list[torch.Tensor]) -> list[tuple]:
    """(observations, rewards, terminated, truncated) of each step, copied (the env reuses buffers)."""
    steps = []
    for action in plan:
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append(({"policy": obs["policy"].clone()}, reward.clone(), terminated.clone(), truncated.clone()))
    return steps


def through_a_file(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("task", TASKS)
def test_a_loaded_env_steps_on_exactly_like_the_saved_one(task: str) -> None:
    env = make_env(task, NUM_ENVS, "cpu", seed=1)
    env.reset()
    roll(env, actions(env, 150, seed=2))  # long enough for episodes to end and reset
    saved, rng = through_a_file(env.state_dict()), env.generator.get_state()
    assert all(value.device.type == "cpu" for value in saved.values() if isinstance(value, torch.Tensor))
    observation = env._get_observations()["policy"].clone()
    later = actions(env, 200, seed=3)
    expected = roll(env, later)

    fresh = make_env(task, NUM_ENVS, "cpu", seed=99)
    fresh.reset()
    fresh.load_state_dict(saved)
    fresh.generator.set_state(rng)
    assert torch.equal(fresh._get_observations()["policy"], observation)
    got = roll(fresh, later)
    assert any(bool(step[2].any() or step[3].any()) for step in expected), "no episode ended: test too short"
    for step, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert torch.equal(want[0]["policy"], have[0]["policy"]), f"observations differ at step {step}"
        assert torch.equal(want[1], have[1]) and torch.equal(want[2], have[2]) and torch.equal(want[3], have[3])


def test_a_state_of_another_env_count_is_refused_and_changes_nothing() -> None:
    small, large = make_env(TASKS[0], 8, "cpu", seed=1), make_env(TASKS[0], 16, "cpu", seed=1)
    before = large.state_dict()
    with pytest.raises(ValueError, match="episode_length_buf"):
        large.load_state_dict(small.state_dict())
    after = large.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in large.state_tensors)
