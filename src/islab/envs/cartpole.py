"""Cartpole, batched in torch, with the semantics of Isaac Lab's direct ``Isaac-Cartpole-Direct-v0``.

Observation ``[pole angle, pole angular velocity, cart position, cart velocity]``; one action,
scaled to a cart force of ``action_scale`` newtons. Physics at 120 Hz, policy at 60 Hz
(decimation 2), 5 s episodes, so the best possible return is about 300. Isaac Lab simulates
the articulation in PhysX; here the classic analytic cart-pole equations (Barto, Sutton &
Anderson 1983, as in gymnasium's CartPole) are integrated with explicit Euler, for all envs at
once on the rank's device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from islab.envs.base import DirectRLEnv, DirectRLEnvCfg


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


class CartpoleEnv(DirectRLEnv):
    cfg: CartpoleEnvCfg

    def _setup_scene(self) -> None:
        # One [N, 4] state tensor: columns are cart pos, cart vel, pole angle, pole angular vel.
        self.state = torch.zeros(self.num_envs, 4, device=self.device)
        self.cart_pos, self.cart_vel = self.state[:, 0], self.state[:, 1]
        self.pole_pos, self.pole_vel = self.state[:, 2], self.state[:, 3]
        self.force = torch.zeros(self.num_envs, device=self.device)
        cfg = self.cfg
        self._total_mass = cfg.cart_mass + cfg.pole_mass
        self._pole_mass_length = cfg.pole_mass * cfg.pole_half_length

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        torch.mul(actions.reshape(self.num_envs), self.cfg.action_scale, out=self.force)

    def _apply_action(self) -> None:
        """The force is held constant over the decimation substeps (zero-order hold)."""

    def _physics_step(self) -> None:
        cfg, dt = self.cfg, self.physics_dt
        sin, cos = torch.sin(self.pole_pos), torch.cos(self.pole_pos)
        temp = (self.force + self._pole_mass_length * self.pole_vel.square() * sin) / self._total_mass
        pole_acc = (cfg.gravity * sin - cos * temp) / (
            cfg.pole_half_length * (4.0 / 3.0 - cfg.pole_mass * cos.square() / self._total_mass)
        )
        cart_acc = temp - self._pole_mass_length * pole_acc * cos / self._total_mass
        # explicit Euler: positions advance with the old velocities
        self.cart_pos.add_(self.cart_vel, alpha=dt)
        self.pole_pos.add_(self.pole_vel, alpha=dt)
        self.cart_vel.add_(cart_acc, alpha=dt)
        self.pole_vel.add_(pole_acc, alpha=dt)

    def _get_observations(self) -> dict[str, torch.Tensor]:
        return {"policy": self.state[:, [2, 3, 0, 1]]}

    def _get_rewards(self) -> torch.Tensor:
        cfg = self.cfg
        terminated = self.reset_terminated.float()
        return (
            cfg.rew_scale_alive * (1.0 - terminated)
            + cfg.rew_scale_terminated * terminated
            + cfg.rew_scale_pole_pos * self.pole_pos.square()
            + cfg.rew_scale_cart_vel * self.cart_vel.abs()
            + cfg.rew_scale_pole_vel * self.pole_vel.abs()
        )

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        time_out = self.episode_length_buf >= self.max_episode_length - 1
        out_of_bounds = (self.cart_pos.abs() > self.cfg.max_cart_pos) | (self.pole_pos.abs() > math.pi / 2)
        return out_of_bounds, time_out

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        super()._reset_idx(env_ids)
        low, high = self.cfg.initial_pole_angle_range
        angles = torch.rand(len(env_ids), device=self.device, generator=self.generator)
        new_state = torch.zeros(len(env_ids), 4, device=self.device)
        new_state[:, 2] = (low + (high - low) * angles) * math.pi
        self.state[env_ids] = new_state
