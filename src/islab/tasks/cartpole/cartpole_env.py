"""Cartpole, batched in torch, with the semantics of Isaac Lab's direct ``Isaac-Cartpole-Direct-v0``.

Observation ``[pole angle, pole angular velocity, cart position, cart velocity]``; one action,
scaled to a cart force of ``action_scale`` newtons. Physics at 120 Hz, policy at 60 Hz
(decimation 2), 5 s episodes, so the best possible return is about 300. Isaac Lab simulates
the articulation in PhysX; here the classic analytic cart-pole equations (Barto, Sutton &
Anderson 1983, as in gymnasium's CartPole) are integrated with explicit Euler, for all envs at
once on the rank's device.

How the step is written, for speed (see ``islab.envs.base``): the state lives in one [4, N]
tensor, one contiguous row per quantity (cart pos, cart vel, pole angle, pole vel), so positions
and velocities are two strided [2, N] views and each Euler update is one op for both bodies;
``env.state`` is its [N, 4] transpose (columns as before). The equations are three pure
functions (:func:`accelerations`, :func:`out_of_bounds`, :func:`reward`) written with fused
``addcmul``-style ops and folded constants; the eager hooks call them, and so does the compiled
step (:func:`fused_advance`). ``F / M`` is formed once per policy step, not per substep.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from islab.envs import render
from islab.envs.base import EPISODES_ENDED, DirectRLEnv, DirectRLEnvCfg, StepResult


@dataclass
class CartpoleEnvCfg(DirectRLEnvCfg):
    num_envs: int = 4096
    sim_dt: float = 1 / 120
    decimation: int = 2
    episode_length_s: float = 5.0
    observation_space: int = 4
    action_space: int = 1
    action_scale: float = 100.0  # [N]
    # physical parameters of the classic cart-pole
    gravity: float = 9.81
    cart_mass: float = 1.0
    pole_mass: float = 0.1
    pole_half_length: float = 0.5
    # reset
    max_cart_pos: float = 3.0  # the cart is reset if it exceeds that position [m]
    initial_pole_angle_range: tuple[float, float] = (-0.25, 0.25)  # times pi [rad]
    # reward scales
    rew_scale_alive: float = 1.0
    rew_scale_terminated: float = -2.0
    rew_scale_pole_pos: float = -1.0
    rew_scale_cart_vel: float = -0.01
    rew_scale_pole_vel: float = -0.005


# -- the equations, once ------------------------------------------------------------------------
# Pure per-env functions on [N] rows. The eager hooks call them op by op; ``fused_advance`` calls
# the same functions inside one torch.compile'd kernel, so the two paths cannot drift apart.


def accelerations(
    theta: torch.Tensor, theta_dot: torch.Tensor, force_over_mass: torch.Tensor, cfg: CartpoleEnvCfg
) -> tuple[torch.Tensor, torch.Tensor]:
    """The classic cart-pole (Barto et al.; gymnasium's CartPole), with M = m_c + m_p:

    temp     = F / M + (m_p l / M) θ̇² sin θ
    θ̈        = (g sin θ − cos θ · temp) / (l (4/3 − m_p cos² θ / M))
    ẍ        = temp − (m_p l / M) θ̈ cos θ

    Returns (ẍ, θ̈). Constants are folded into fused ``addcmul`` ops."""
    pml_over_m = cfg.pole_mass * cfg.pole_half_length / (cfg.cart_mass + cfg.pole_mass)
    sin, cos = torch.sin(theta), torch.cos(theta)
    temp = torch.addcmul(force_over_mass, theta_dot * theta_dot, sin, value=pml_over_m)
    denominator = torch.addcmul(torch.full_like(cos, cfg.pole_half_length * 4.0 / 3.0), cos, cos, value=-pml_over_m)
    theta_acc = torch.addcmul(cfg.gravity * sin, cos, temp, value=-1.0) / denominator
    return torch.addcmul(temp, theta_acc, cos, value=-pml_over_m), theta_acc


def out_of_bounds(x: torch.Tensor, theta: torch.Tensor, cfg: CartpoleEnvCfg) -> torch.Tensor:
    """Terminated (bool): the cart left the track or the pole fell past horizontal."""
    return (x.abs() > cfg.max_cart_pos) | (theta.abs() > math.pi / 2)


def reward(
    terminated: torch.Tensor, theta: torch.Tensor, x_dot: torch.Tensor, theta_dot: torch.Tensor, cfg: CartpoleEnvCfg
) -> torch.Tensor:
    """Alive bonus, or the termination penalty instead of it (``terminated`` as 0/1 floats:
    t * (terminated - alive) + alive is exact for t in {0, 1} and cheaper than torch.where),
    minus the pole angle and the velocities."""
    value = terminated * (cfg.rew_scale_terminated - cfg.rew_scale_alive) + cfg.rew_scale_alive
    value = torch.addcmul(value, theta, theta, value=cfg.rew_scale_pole_pos)
    return value + cfg.rew_scale_cart_vel * x_dot.abs() + cfg.rew_scale_pole_vel * theta_dot.abs()


def fused_advance(
    action: torch.Tensor,
    state: torch.Tensor,
    episode_length: torch.Tensor,
    episode_return: torch.Tensor,
    masks_out: torch.Tensor,
    *,
    cfg: CartpoleEnvCfg,
    physics_dt: float,
    max_episode_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Cartpole step up to the reset, as a pure per-env element-wise chain for ``torch.compile``.

    The same functions as the hooks (:func:`accelerations` ``decimation`` times,
    :func:`out_of_bounds`, :func:`reward`), on [N] rows so inductor emits a single loop over the
    envs. It also does the data-independent half of the reset: finished envs
    get a zero state, episode clock and return; their episode statistics are summed first. Writes
    ``state`` [4, N] (rows x, ẋ, θ, θ̇), the episode buffers and ``masks_out`` [3, N] (terminated,
    truncated, done as 0/1 bytes) in place. Returns the reward [N],
    the observation [N, 4] (zeros where an env finished; the caller writes the new pole angle)
    and ``[finished envs, mean return of their episodes, mean length]``.
    """
    x, x_dot, theta, theta_dot = state.unbind(0)
    force_over_mass = action.reshape(-1) * cfg.action_scale / (cfg.cart_mass + cfg.pole_mass)  # as _pre_physics_step
    for _ in range(cfg.decimation):
        x_acc, theta_acc = accelerations(theta, theta_dot, force_over_mass, cfg)
        x, theta = x + physics_dt * x_dot, theta + physics_dt * theta_dot
        x_dot, theta_dot = x_dot + physics_dt * x_acc, theta_dot + physics_dt * theta_acc
    # Masks stay float (0/1) inside the kernel: bool values vectorize badly in inductor's C++
    # (measured ~3x slower per mask). They are stored as 0/1 bytes into the env's done buffers,
    # which are those bytes viewed as bools, so no conversion op runs after the kernel.
    length = episode_length.to(reward_dtype := state.dtype) + 1.0
    time_out = (length >= max_episode_length - 1).to(reward_dtype)
    terminated = out_of_bounds(x, theta, cfg).to(reward_dtype)
    done = torch.maximum(terminated, time_out)
    step_reward = reward(terminated, theta, x_dot, theta_dot, cfg)
    returns = episode_return + step_reward
    finished = done.sum()
    per_episode = 1.0 / torch.clamp(finished, min=1.0)
    stats = torch.stack((finished, (returns * done).sum() * per_episode, (length * done).sum() * per_episode))
    keep = 1.0 - done
    x, x_dot, theta, theta_dot = x * keep, x_dot * keep, theta * keep, theta_dot * keep
    state.copy_(torch.stack((x, x_dot, theta, theta_dot)))
    episode_length.copy_((length * keep).to(episode_length.dtype))
    episode_return.copy_(returns * keep)
    masks_out.copy_(torch.stack((terminated, time_out, done)).to(torch.uint8))
    return step_reward, torch.stack((theta, theta_dot, x, x_dot), dim=1), stats


class CartpoleEnv(DirectRLEnv):
    cfg: CartpoleEnvCfg
    # cart position/velocity, pole angle/velocity; the force of the last action (held for decimation)
    state_tensors = (*DirectRLEnv.state_tensors, "_state", "force")
    # The policy's inputs and outputs by name, in order (islab-train export writes them to policy.json).
    observation_names: ClassVar[tuple[str, ...]] = (
        "pole_angle", "pole_angular_velocity", "cart_position", "cart_velocity",
    )  # fmt: skip
    action_names: ClassVar[tuple[str, ...]] = ("cart_force",)
    success_measure: ClassVar[str] = "the episode reached its time limit without the cart or pole leaving bounds"

    def episode_success(self, terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
        """Per env, whether an episode that ended in this step succeeded (islab-train play counts
        it); called with the step's own terminated/truncated flags."""
        return truncated & ~terminated

    def _draw(self, env_id: int, width: int, height: int) -> render.Canvas:
        """Side view: the track between its limits (dashed ends), the cart, the pole from its pivot
        (angle 0 is upright, positive leans towards +x, as in the equations)."""
        cfg = self.cfg
        x, theta = (float(value) for value in self._state[0::2, env_id].tolist())  # cart pos, pole angle
        limit, pole = cfg.max_cart_pos, 2 * cfg.pole_half_length
        canvas = render.Canvas(width, height, (-limit - 0.6, limit + 0.6), (-0.9, pole + 0.6))
        canvas.line((-limit, 0.0), (limit, 0.0), 2, render.INK)  # the track
        for end in (-limit, limit):
            canvas.line((end, -0.15), (end, 0.15), 2, render.ACCENT)
        canvas.rect(x - 0.3, -0.1, x + 0.3, 0.12, render.BLUE)  # the cart
        tip = (x + pole * math.sin(theta), 0.12 + pole * math.cos(theta))
        canvas.line((x, 0.12), tip, max(3.0, canvas.scale * 0.08), render.ACCENT)
        canvas.disk(x, 0.12, max(2.5, canvas.scale * 0.06), render.INK)
        return canvas

    def _setup_scene(self) -> None:
        n, dev, cfg = self.num_envs, self.device, self.cfg
        # Rows: cart pos, cart vel, pole angle, pole angular vel. ``state`` is the [N, 4] view
        # (columns in that order) that tests and users index as state[env, quantity].
        self._state = torch.zeros(4, n, device=dev)
        self.state = self._state.T
        self.cart_pos, self.cart_vel, self.pole_pos, self.pole_vel = self._state.unbind(0)
        self._pos = self._state[0::2]  # [2, N]: cart pos, pole angle
        self._vel = self._state[1::2]  # [2, N]: cart vel, pole vel
        self.force = torch.zeros(n, device=dev)
        self._force_over_mass = torch.zeros(n, device=dev)
        self._reward_dtype = self._state.dtype
        self._total_mass = cfg.cart_mass + cfg.pole_mass

    def _make_fast_step(self) -> Callable[[torch.Tensor], StepResult]:
        """``step`` as one compiled kernel (``fused_advance``) plus the data-dependent rest of the
        reset: draw the new pole angles (same generator, same draws as ``_reset_done``) and put
        them into the state and the observation where an env finished."""
        kernel = torch.compile(
            functools.partial(
                fused_advance,
                cfg=self.cfg,
                physics_dt=self.physics_dt,
                max_episode_length=self.max_episode_length,
            ),
            fullgraph=True,
            dynamic=False,
            # On CPU a C++ wrapper around the kernel instead of inductor's Python one: ~20 us less
            # per call at 4096 envs (the call overhead, not the arithmetic, dominates there).
            options={"cpp_wrapper": True} if self.device.type == "cpu" else None,
        )
        low, high = self.cfg.initial_pole_angle_range

        def fast_step(action: torch.Tensor) -> StepResult:
            # buffers are passed on every call, not bound once: libraries replace some of them
            # (rsl_rl assigns a new episode_length_buf for init_at_random_ep_len)
            # without autograd: a graph without autograd wrappers, ~8 us cheaper per call; the
            # env never needs gradients, and libraries step it under no_grad anyway
            with torch.no_grad():
                reward, obs, stats = kernel(
                    action, self._state, self.episode_length_buf, self.episode_return_buf, self._done_bytes
                )
            self.common_step_counter += 1
            self.reward_buf = reward
            self.extras = {
                "log": {"episode_return": stats[1], "episode_length": stats[2]},
                EPISODES_ENDED: stats[0].to(torch.long),
            }
            # the new pole angles, as _reset_done draws them: one per env, kept where an env finished
            angles = torch.empty(self.num_envs, device=self.device)
            angles.uniform_(low * math.pi, high * math.pi, generator=self.generator)
            self.pole_pos.copy_(torch.where(self.reset_buf, angles, self.pole_pos))
            obs[:, 0].copy_(self.pole_pos)  # equal elsewhere already; a copy beats a 2nd where
            return {"policy": obs}, reward, self.reset_terminated, self.reset_time_outs, self.extras

        return fast_step

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        torch.mul(actions.reshape(self.num_envs), self.cfg.action_scale, out=self.force)
        torch.div(self.force, self._total_mass, out=self._force_over_mass)

    def _apply_action(self) -> None:
        """The force is held constant over the decimation substeps (zero-order hold)."""

    def _physics_step(self) -> None:
        """One explicit-Euler substep (:func:`accelerations`): x, θ += dt · (ẋ, θ̇) with the old
        velocities (one op for both bodies), then ẋ, θ̇ += dt · (ẍ, θ̈)."""
        dt = self.physics_dt
        cart_acc, pole_acc = accelerations(self.pole_pos, self.pole_vel, self._force_over_mass, self.cfg)
        self._pos.add_(self._vel, alpha=dt)
        self.cart_vel.add_(cart_acc, alpha=dt)
        self.pole_vel.add_(pole_acc, alpha=dt)

    def _get_observations(self) -> dict[str, torch.Tensor]:
        # a fresh [N, 4] tensor each step (libraries keep the previous observation)
        return {"policy": torch.stack((self.pole_pos, self.pole_vel, self.cart_pos, self.cart_vel), dim=1)}

    def _get_rewards(self) -> torch.Tensor:
        terminated = self.reset_terminated.to(self._reward_dtype)
        return reward(terminated, self.pole_pos, self.cart_vel, self.pole_vel, self.cfg)

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        torch.ge(self.episode_length_buf, self.max_episode_length - 1, out=self.reset_time_outs)
        self.reset_terminated.copy_(out_of_bounds(self.cart_pos, self.pole_pos, self.cfg))
        return self.reset_terminated, self.reset_time_outs

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        super()._reset_idx(env_ids)
        low, high = self.cfg.initial_pole_angle_range
        # one op, not rand + 3 (a third of the reset's cost at 4096 envs); the fused step does the same
        angles = torch.empty(len(env_ids), device=self.device)
        angles.uniform_(low * math.pi, high * math.pi, generator=self.generator)
        self._state.index_fill_(1, env_ids, 0.0)
        self._state[2].index_copy_(0, env_ids, angles)

    def _reset_done(self, done: torch.Tensor) -> None:
        """The auto-reset of ``step`` without a host sync: every env draws a pole angle (one op),
        the envs that finished take theirs and a zero state; the others keep theirs."""
        self._reset_done_buffers(done)
        low, high = self.cfg.initial_pole_angle_range
        angles = torch.empty(self.num_envs, device=self.device)
        angles.uniform_(low * math.pi, high * math.pi, generator=self.generator)
        self._state.masked_fill_(done, 0.0)
        self.pole_pos.copy_(torch.where(done, angles, self.pole_pos))
