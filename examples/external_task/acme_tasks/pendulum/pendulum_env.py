"""Pendulum swing-up, batched in torch: gymnasium's ``Pendulum-v1`` as an Isaac Lab direct task.

The task. A rigid rod hangs from a motorised pivot; starting at a random angle and speed, the
policy must swing it up and hold it upright with a torque too weak (2 N·m) to lift it directly,
so it has to pump energy first. θ = 0 is upright, θ̇ its angular velocity.

The physics are gymnasium's ``Pendulum-v1`` (g = 10, m = 1, l = 1, dt = 0.05, max torque 2,
max speed 8), for all envs of a rank at once on its device, with semi-implicit Euler:

    θ̇ ← clip(θ̇ + dt · (3g / 2l · sin θ + 3 / (m l²) · u), −8, 8)
    θ  ← θ + dt · θ̇                        (the *new* speed: energy stays bounded)

Observation ``[cos θ, sin θ, θ̇]``; one action in [-1, 1] scaled to the torque
``u = clip(2 · a, −2, 2)``. Reward ``−(norm(θ)² + 0.1 θ̇² + 0.001 u²)`` with ``norm`` wrapping
the angle into [−π, π), charged on the state *before* the step and that step's torque, as
gymnasium does, so returns compare with published Pendulum-v1 numbers (random policy about
−1200, a good swing-up −150 to −200 per 200-step episode). Episodes end by time-out only
(200 policy steps = 10 s); there is no failure termination.

How it maps onto ``islab.envs.DirectRLEnv`` (the hooks Isaac Lab's direct tasks fill in):
``_pre_physics_step`` scales and clips the action and keeps the pre-step state for the reward;
``_physics_step`` is one Euler step (decimation 1: policy and physics both at 20 Hz);
``_get_dones`` marks time-outs; ``_get_rewards`` charges the pre-step state; ``_reset_idx``
draws new angles and speeds and adds the episode's upright fraction to ``extras["log"]``. Every
hook is a few in-place tensor ops on buffers allocated once, with no host synchronisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from islab.envs import DirectRLEnv, DirectRLEnvCfg


@dataclass
class PendulumEnvCfg(DirectRLEnvCfg):
    # What `islab-train tasks` shows and the default --num-envs (read from an instance of this config).
    # Annotated, unlike Isaac Lab's @configclass cfgs: in a plain dataclass a bare
    # ``observation_space = 3`` would be overwritten by DirectRLEnvCfg's field default (0) at init.
    num_envs: int = 256  # per rank
    sim_dt: float = 0.05  # gymnasium's dt [s]
    decimation: int = 1
    episode_length_s: float = 10.0  # 200 steps of 0.05 s, gymnasium's TimeLimit
    observation_space: int = 3
    action_space: int = 1
    # physics (gymnasium Pendulum-v1)
    gravity: float = 10.0
    mass: float = 1.0
    length: float = 1.0
    max_torque: float = 2.0  # [N m]; the policy's action in [-1, 1] is scaled by this
    max_speed: float = 8.0  # [rad/s]
    # reset: uniform angle in [-pi, pi) (anywhere on the circle), speed in [-1, 1]
    initial_angle_range: float = math.pi
    initial_speed_range: float = 1.0
    # reward: -(angle^2 + w_speed * speed^2 + w_torque * torque^2)
    rew_weight_speed: float = 0.1
    rew_weight_torque: float = 0.001
    # for the episode statistic "upright_fraction": |angle| below this counts as upright [rad]
    upright_angle: float = 0.5


def normalize_angle(theta: torch.Tensor) -> torch.Tensor:
    """``theta`` wrapped into [−π, π) (gymnasium's ``angle_normalize``): 2π·k is upright again."""
    return torch.remainder(theta + math.pi, 2 * math.pi) - math.pi


def reward(theta: torch.Tensor, theta_dot: torch.Tensor, torque: torch.Tensor, cfg: PendulumEnvCfg) -> torch.Tensor:
    """−(norm(θ)² + 0.1 θ̇² + 0.001 u²): 0 exactly upright at rest with no torque, about −16 at worst."""
    angle = normalize_angle(theta)
    cost = torch.addcmul(angle * angle, theta_dot, theta_dot, value=cfg.rew_weight_speed)
    return cost.addcmul_(torque, torque, value=cfg.rew_weight_torque).neg_()


class PendulumEnv(DirectRLEnv):
    cfg: PendulumEnvCfg

    def _setup_scene(self) -> None:
        n, dev, cfg = self.num_envs, self.device, self.cfg
        # Rows: angle, angular velocity; ``state`` is the [N, 2] view users index as state[env, i].
        self._state = torch.zeros(2, n, device=dev)
        self.state = self._state.T
        self.theta, self.theta_dot = self._state.unbind(0)
        self._prev_state = torch.zeros(2, n, device=dev)  # what the reward charges (gymnasium's order)
        self.torque = torch.zeros(n, device=dev)
        self._upright_steps = torch.zeros(n, device=dev)
        # constants of the Euler step, folded once
        self._gravity_acc = 3.0 * cfg.gravity / (2.0 * cfg.length)
        self._torque_acc = 3.0 / (cfg.mass * cfg.length**2)

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        torch.mul(actions.reshape(self.num_envs), self.cfg.max_torque, out=self.torque)
        self.torque.clamp_(-self.cfg.max_torque, self.cfg.max_torque)
        self._prev_state.copy_(self._state)

    def _apply_action(self) -> None:
        """The torque is held constant over the step (zero-order hold); ``_physics_step`` reads it."""

    def _physics_step(self) -> None:
        dt, cfg = self.physics_dt, self.cfg
        acc = torch.sin(self.theta).mul_(self._gravity_acc).add_(self.torque, alpha=self._torque_acc)
        self.theta_dot.add_(acc, alpha=dt).clamp_(-cfg.max_speed, cfg.max_speed)
        self.theta.add_(self.theta_dot, alpha=dt)  # with the new speed: semi-implicit Euler

    def _get_observations(self) -> dict[str, torch.Tensor]:
        # a fresh [N, 3] tensor each step (libraries keep the previous observation)
        return {"policy": torch.stack((torch.cos(self.theta), torch.sin(self.theta), self.theta_dot), dim=1)}

    def _get_rewards(self) -> torch.Tensor:
        theta, theta_dot = self._prev_state.unbind(0)
        self._upright_steps += normalize_angle(theta).abs_() < self.cfg.upright_angle
        return reward(theta, theta_dot, self.torque, self.cfg)

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Exactly max_episode_length (200) steps per episode, gymnasium's TimeLimit. (Isaac Lab's
        # tasks compare with max_episode_length - 1 and so end one step early.) No termination:
        # reset_terminated stays all False.
        torch.ge(self.episode_length_buf, self.max_episode_length, out=self.reset_time_outs)
        return self.reset_terminated, self.reset_time_outs

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        log = self.extras.get("log")
        if log is not None:  # inside step(): the base class has just logged these envs' episodes
            steps = self.episode_length_buf[env_ids].clamp(min=1)
            log["upright_fraction"] = (self._upright_steps[env_ids] / steps).mean()
        super()._reset_idx(env_ids)
        cfg = self.cfg
        # one uniform draw for both rows, scaled per row: angle in [-a, a), speed in [-s, s)
        fresh = torch.empty(2, len(env_ids), device=self.device).uniform_(-1.0, 1.0, generator=self.generator)
        fresh[0] *= cfg.initial_angle_range
        fresh[1] *= cfg.initial_speed_range
        self._state.index_copy_(1, env_ids, fresh)
        self._upright_steps.index_fill_(0, env_ids, 0.0)
