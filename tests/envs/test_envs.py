"""The batched Cartpole against a plain scalar reference of the same equations, and its episode rules."""

from __future__ import annotations

import math

import pytest
import torch

from islab.envs import make_env
from islab.envs.base import EPISODES_ENDED
from islab.tasks.cartpole.cartpole_env import CartpoleEnv, CartpoleEnvCfg

TASK = "Islab-Cartpole-v0"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def scalar_reference_step(state: list[float], action: float, cfg: CartpoleEnvCfg) -> list[float]:
    """One policy step of the classic cart-pole, one env, plain Python floats."""
    x, x_dot, theta, theta_dot = state
    force = action * cfg.action_scale
    total_mass = cfg.cart_mass + cfg.pole_mass
    pole_mass_length = cfg.pole_mass * cfg.pole_half_length
    for _ in range(cfg.decimation):
        sin, cos = math.sin(theta), math.cos(theta)
        temp = (force + pole_mass_length * theta_dot**2 * sin) / total_mass
        theta_acc = (cfg.gravity * sin - cos * temp) / (
            cfg.pole_half_length * (4.0 / 3.0 - cfg.pole_mass * cos**2 / total_mass)
        )
        x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
        x, theta = x + cfg.sim_dt * x_dot, theta + cfg.sim_dt * theta_dot
        x_dot, theta_dot = x_dot + cfg.sim_dt * x_acc, theta_dot + cfg.sim_dt * theta_acc
    return [x, x_dot, theta, theta_dot]


def scalar_reference_reward(state: list[float], terminated: bool, cfg: CartpoleEnvCfg) -> float:
    _, x_dot, theta, theta_dot = state
    return (
        cfg.rew_scale_alive * (not terminated)
        + cfg.rew_scale_terminated * terminated
        + cfg.rew_scale_pole_pos * theta**2
        + cfg.rew_scale_cart_vel * abs(x_dot)
        + cfg.rew_scale_pole_vel * abs(theta_dot)
    )


@pytest.mark.parametrize("device", DEVICES)
def test_batched_step_matches_scalar_reference(device: str) -> None:
    env = make_env(TASK, num_envs=64, device=device, seed=3)
    obs, _ = env.reset()
    torch.manual_seed(0)
    states = [[row[2], row[3], row[0], row[1]] for row in obs["policy"].double().cpu().tolist()]
    for _ in range(40):
        actions = torch.rand(64, 1) * 2 - 1
        obs, reward, terminated, truncated, _ = env.step(actions.to(device))
        for i in range(64):
            expected = scalar_reference_step(states[i], float(actions[i]), env.cfg)
            done_expected = abs(expected[0]) > env.cfg.max_cart_pos or abs(expected[2]) > math.pi / 2
            assert bool(terminated[i]) == done_expected
            assert float(reward[i]) == pytest.approx(
                scalar_reference_reward(expected, done_expected, env.cfg), abs=1e-4
            )
            if not (done_expected or bool(truncated[i])):
                got = obs["policy"][i].double().cpu().tolist()
                assert [got[2], got[3], got[0], got[1]] == pytest.approx(expected, abs=1e-4)
        # continue the reference from the env's state (finished envs were auto-reset)
        states = [[row[2], row[3], row[0], row[1]] for row in obs["policy"].double().cpu().tolist()]


def test_observation_and_action_spaces_follow_isaac_lab() -> None:
    env = make_env(TASK, num_envs=8)
    assert env.single_observation_space["policy"].shape == (4,)
    assert env.single_action_space.shape == (1,)
    assert env.observation_space["policy"].shape == (8, 4)
    assert env.max_episode_length == 300  # 5 s at 60 Hz
    obs, _extras = env.reset()
    assert set(obs) == {"policy"} and obs["policy"].shape == (8, 4)
    assert (obs["policy"][:, 0].abs() <= 0.25 * math.pi + 1e-6).all()
    assert (obs["policy"][:, 1:] == 0).all()


def test_termination_reward_and_auto_reset() -> None:
    env = make_env(TASK, num_envs=4, seed=0)
    env.reset()
    env.state[:] = 0.0
    env.state[0, 0] = 3.5  # cart beyond 3 m
    env.state[1, 2] = 1.6  # pole beyond pi/2
    obs, reward, terminated, truncated, extras = env.step(torch.zeros(4, 1))
    assert terminated.tolist() == [True, True, False, False]
    assert not truncated.any()
    assert reward[0] == pytest.approx(-2.0, abs=1e-6)  # terminated: no alive bonus, -2
    assert reward[2] == pytest.approx(1.0, abs=1e-6)  # upright at rest: alive bonus only
    assert "log" in extras and extras["log"]["episode_length"] == pytest.approx(1.0)
    # the terminated envs were reset inside step: fresh state, fresh episode counter
    assert env.episode_length_buf.tolist() == [0, 0, 1, 1]
    assert obs["policy"][0, 2] == 0.0 and abs(float(obs["policy"][0, 0])) <= 0.25 * math.pi


def test_truncation_after_five_seconds() -> None:
    env = make_env(TASK, num_envs=2, seed=0)
    env.reset()
    env.episode_length_buf[:] = env.max_episode_length - 2
    env.state[:] = 0.0
    _, reward, terminated, truncated, _extras = env.step(torch.zeros(2, 1))
    assert truncated.all() and not terminated.any()
    assert reward == pytest.approx(torch.ones(2))
    assert (env.episode_length_buf == 0).all()


def rollout(seed: int, steps: int = 50) -> torch.Tensor:
    env = make_env(TASK, num_envs=16, seed=seed)
    obs, _ = env.reset()
    actions = torch.sin(torch.arange(steps * 16, dtype=torch.float32)).reshape(steps, 16, 1)
    trajectory = [obs["policy"].clone()]
    for action in actions:
        obs, *_ = env.step(action)
        trajectory.append(obs["policy"].clone())
    return torch.stack(trajectory)


def test_same_seed_same_trajectory_different_rank_seed_differs() -> None:
    base_seed = 42
    rank0, rank0_again, rank1 = rollout(base_seed + 0), rollout(base_seed + 0), rollout(base_seed + 1)
    assert torch.equal(rank0, rank0_again)
    assert not torch.allclose(rank0, rank1)


def test_registered_with_gymnasium() -> None:
    import gymnasium

    spec = gymnasium.spec(TASK)
    assert spec.kwargs["env_cfg_entry_point"] == "islab.tasks.cartpole.cartpole_env:CartpoleEnvCfg"


def test_skrl_isaaclab_wrapper_accepts_the_env() -> None:
    from skrl.envs.wrappers.torch import wrap_env

    env = wrap_env(make_env(TASK, num_envs=8, seed=0), wrapper="isaaclab")
    obs, _ = env.reset()
    assert obs.shape == (8, 4)
    obs, reward, terminated, truncated, _ = env.step(torch.zeros(8, 1))
    assert reward.shape == terminated.shape == truncated.shape == (8, 1)


def _run_side_by_side(num_envs: int, steps: int, compile_step: bool) -> None:
    """Step the reference (hooks, eager) and the env under test with the same seed and actions;
    every step must return the same observation, reward, dones, episode statistics and state."""
    reference = make_env(TASK, num_envs=num_envs, seed=7)
    env = CartpoleEnv(CartpoleEnvCfg(num_envs=num_envs, seed=7, compile_step=compile_step))
    assert env.compiled == compile_step
    obs_ref, _ = reference.reset()
    obs, _ = env.reset()
    torch.testing.assert_close(obs["policy"], obs_ref["policy"])
    generator = torch.Generator().manual_seed(1)
    # as rsl_rl's init_at_random_ep_len does: a NEW tensor, so time-outs happen within the test
    lengths = torch.randint(0, reference.max_episode_length, (num_envs,), generator=generator)
    reference.episode_length_buf, env.episode_length_buf = lengths.clone(), lengths.clone()
    time_outs = 0
    finished = 0
    for step in range(steps):
        actions = torch.rand(num_envs, 1, generator=generator) * 2 - 1
        expected = reference.step(actions)
        got = env.step(actions)
        if step == 0:  # the first step compiles; a failed compile falls back to eager, with a warning
            assert env.compiled == compile_step, "the compiled step fell back to eager: eager was compared with eager"
        # float32 rounding of the fused kernel vs the op-by-op hooks grows over the steps (up to
        # 1.6e-5 measured in 80 steps); a wrong reset or equation differs by 1e-2 or more
        torch.testing.assert_close(got[0]["policy"], expected[0]["policy"], atol=5e-5, rtol=5e-5)
        torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-5)
        assert torch.equal(got[2], expected[2]) and torch.equal(got[3], expected[3])
        assert got[2].dtype == got[3].dtype == torch.bool
        assert set(got[4]) == set(expected[4])
        time_outs += int(expected[3].sum())
        if int(expected[4][EPISODES_ENDED]) > 0:
            finished += 1
            assert torch.equal(got[4][EPISODES_ENDED], expected[4][EPISODES_ENDED])
            for key in ("episode_return", "episode_length"):
                torch.testing.assert_close(got[4]["log"][key], expected[4]["log"][key], atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(env.state, reference.state, atol=5e-5, rtol=5e-5)
        assert torch.equal(env.episode_length_buf, reference.episode_length_buf)
        torch.testing.assert_close(env.episode_return_buf, reference.episode_return_buf, atol=1e-4, rtol=1e-5)
    assert finished > 0 and time_outs > 0  # the auto-reset path was exercised, truncation included


def test_eager_step_matches_reference_trajectory() -> None:
    """The side-by-side harness itself: two eager envs with one seed agree step for step."""
    _run_side_by_side(num_envs=128, steps=60, compile_step=False)


@pytest.mark.slow
def test_compiled_fast_step_matches_the_hooks() -> None:
    """The torch.compile'd fused step (ISLAB_ENV_COMPILE=1) returns what the hooks return, resets
    included: same random draws in the same env order, same episode statistics. Compiling takes
    seconds to tens of seconds the first time, hence slow."""
    _run_side_by_side(num_envs=256, steps=80, compile_step=True)


def test_compile_flag_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from islab.envs.base import compile_requested

    assert not compile_requested(CartpoleEnvCfg(), environ={})
    assert compile_requested(CartpoleEnvCfg(), environ={"ISLAB_ENV_COMPILE": "1"})
    assert not compile_requested(CartpoleEnvCfg(compile_step=False), environ={"ISLAB_ENV_COMPILE": "1"})
