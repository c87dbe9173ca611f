"""The pendulum swing-up env: physics, reward, shapes, episode handling.

Run from the repository root (no install needed; the launcher-side registration is tested by
islab-train's own tests):

    PYTHONPATH=src:examples/external_task python -m pytest examples/external_task/tests -q
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch

from acme_tasks.pendulum.pendulum_env import PendulumEnv, PendulumEnvCfg, normalize_angle


def make(num_envs: int = 8, seed: int = 0, **overrides: object) -> PendulumEnv:
    env = PendulumEnv(PendulumEnvCfg(num_envs=num_envs, seed=seed, **overrides))
    env.reset()
    return env


def set_state(env: PendulumEnv, theta: list[float], theta_dot: list[float]) -> None:
    env.theta.copy_(torch.tensor(theta))
    env.theta_dot.copy_(torch.tensor(theta_dot))


def energy(env: PendulumEnv) -> torch.Tensor:
    """Energy per unit moment of inertia of the rod (θ = 0 upright, k = 3g / 2l):
    ½θ̇² + k·cos θ, plus semi-implicit Euler's first-order correction (dt / 2)·θ̇·k·sin θ. The
    integrator conserves this modified energy up to O(dt²) (symplectic methods do; the plain
    energy only oscillates by ~10 % at dt = 0.05), while explicit Euler or a wrong force law
    would drift by far more."""
    k = 1.5 * env.cfg.gravity / env.cfg.length
    sin_term = 0.5 * env.physics_dt * env.theta_dot * k * torch.sin(env.theta)
    return 0.5 * env.theta_dot**2 + k * torch.cos(env.theta) + sin_term


def test_free_swing_conserves_energy_and_swings_through_the_bottom() -> None:
    env = make(num_envs=3)
    # released at rest at 90°, 120° and 60° from upright: speeds stay below the 8 rad/s clip
    set_state(env, [math.pi / 2, 2 * math.pi / 3, -math.pi / 3], [0.0, 0.0, 0.0])
    start = energy(env).clone()
    scale = 1.5 * env.cfg.gravity / env.cfg.length  # the potential's amplitude (15)
    passed_bottom = torch.zeros(3, dtype=torch.bool)
    for _ in range(40):  # 2 s, about one period of the swing
        env.step(torch.zeros(3, 1))
        drift = (energy(env) - start).abs() / scale
        assert torch.all(drift < 0.02), drift  # measured: < 0.008
        passed_bottom |= normalize_angle(env.theta).abs() > 0.9 * math.pi
    # gravity pulls away from upright: every pendulum fell through the hanging position
    assert passed_bottom.all()


def test_matches_gymnasium_pendulum_v1() -> None:
    """Same start, same torques: the same trajectory and rewards as gymnasium's own Pendulum-v1."""
    reference = gymnasium.make("Pendulum-v1").unwrapped
    reference.reset(seed=0)
    env = make(num_envs=1)
    set_state(env, [2.5], [-0.7])
    reference.state = np.array([2.5, -0.7])
    rng = np.random.default_rng(0)
    for _ in range(60):
        torque = rng.uniform(-2.5, 2.5)  # beyond max torque too: both clip at 2
        ref_obs, ref_reward, *_ = reference.step(np.array([torque], dtype=np.float32))
        obs, reward, *_ = env.step(torch.tensor([[torque / env.cfg.max_torque]]))
        np.testing.assert_allclose(obs["policy"][0].numpy(), ref_obs, atol=1e-4)
        assert reward.item() == pytest.approx(float(ref_reward), abs=1e-3)


def test_angle_normalisation() -> None:
    theta = torch.tensor([0.0, 2 * math.pi, -2 * math.pi, 3 * math.pi / 2, -3 * math.pi / 2, 7.0, math.pi])
    expected = torch.tensor([0.0, 0.0, 0.0, -math.pi / 2, math.pi / 2, 7.0 - 2 * math.pi, -math.pi])
    torch.testing.assert_close(normalize_angle(theta), expected, atol=1e-5, rtol=0)


def test_reward_is_zero_at_upright_rest_on_any_turn_and_worst_hanging() -> None:
    env = make(num_envs=4)
    # upright after 0, +1, -1 and +3 full turns, at rest, no torque: the best possible reward
    set_state(env, [0.0, 2 * math.pi, -2 * math.pi, 6 * math.pi], [0.0] * 4)
    _, reward, *_ = env.step(torch.zeros(4, 1))
    assert torch.all(reward.abs() < 1e-4), reward
    # hanging, spinning at full speed, full torque: the cost adds up to π² + 0.1·8² + 0.001·2²
    set_state(env, [math.pi - 1e-4] * 4, [8.0] * 4)
    _, reward, *_ = env.step(torch.ones(4, 1))
    torch.testing.assert_close(reward, torch.full((4,), -(math.pi**2 + 6.4 + 0.004)), atol=2e-3, rtol=0)


def test_observation_and_space_shapes() -> None:
    env = make(num_envs=5)
    assert env.single_observation_space["policy"].shape == (3,)
    assert env.single_action_space.shape == (1,)
    obs, reward, terminated, truncated, _ = env.step(torch.zeros(5, 1))
    assert obs["policy"].shape == (5, 3) and obs["policy"].dtype == torch.float32
    assert reward.shape == terminated.shape == truncated.shape == (5,)
    # [cos θ, sin θ, θ̇] of the current state
    expected = torch.stack((torch.cos(env.theta), torch.sin(env.theta), env.theta_dot), dim=1)
    torch.testing.assert_close(obs["policy"], expected)


def test_auto_reset_after_200_steps_with_episode_log() -> None:
    env = make(num_envs=16, seed=3)
    assert env.max_episode_length == 200
    for step in range(1, 201):
        _, _, terminated, truncated, extras = env.step(torch.zeros(16, 1))
        assert not terminated.any()  # time-outs only
        if step < 200:
            # the episode log is reported every step (no host sync to ask whether one ended); how many
            # ended says whether its means count
            assert not truncated.any() and int(extras["episodes_ended"]) == 0, step
    assert truncated.all() and int(extras["episodes_ended"]) == 16
    assert extras["log"]["episode_length"].item() == 200
    assert extras["log"]["episode_return"].item() < 0
    assert 0.0 <= extras["log"]["upright_fraction"].item() <= 1.0
    # every env restarted: clock back to zero, a fresh random state inside the reset ranges
    assert torch.all(env.episode_length_buf == 0)
    assert torch.all(env.theta.abs() <= math.pi) and torch.all(env.theta_dot.abs() <= 1.0)
    assert env.theta.std() > 0.5  # spread over the circle, not one angle


def test_reset_is_random_and_seeded() -> None:
    a, b, c = make(seed=1), make(seed=1), make(seed=2)
    torch.testing.assert_close(a.state, b.state)
    assert not torch.allclose(a.state, c.state)
    assert a.theta_dot.abs().max() > 0  # velocities are drawn too
