"""Quadcopter, batched in torch, with the semantics of Isaac Lab's direct ``Isaac-Quadcopter-Direct-v0``.

The task. A Crazyflie must fly to a goal point and hover there. Each env has one goal, drawn
uniformly in a 4 m x 4 m square around the spawn point at 0.5-1.5 m height; the drone starts at
rest, level, 0.5 m above the ground. An episode ends after 10 s, or earlier when the drone leaves
the band 0.1 m < z < 2.0 m ("died"). Physics at 100 Hz, policy at 50 Hz (decimation 2): 500
policy steps per episode.

Observation (12): body-frame linear velocity, body-frame angular velocity, gravity direction in
the body frame ("projected gravity", (0, 0, -1) when level), the goal in the body frame. Nothing
is in world coordinates, so the policy needs no knowledge of where its env sits.

Action (4, clamped to [-1, 1]): collective thrust and three body moments, as Isaac Lab applies
them to the drone's body (no rotor model): thrust = thrust_to_weight * weight * (a0 + 1) / 2
along the body z axis (so a0 = -1 is no thrust, a0 = 2 / thrust_to_weight - 1 hovers), moments
= moment_scale * a[1:] newton-metres about the body axes. Held constant over the decimation
substeps (Isaac Lab applies the wrench once per physics step with the same values).

Reward, per policy step, each term times ``step_dt`` (so returns do not depend on the rate):
``lin_vel_reward_scale * |v|^2 + ang_vel_reward_scale * |w|^2
+ distance_to_goal_reward_scale * (1 - tanh(d / 0.8))``. Episode sums per term are kept on the
device and reported at reset in ``extras["log"]`` under Isaac Lab's keys
(``Episode_Reward/<term>`` divided by the episode length in seconds, ``Episode_Termination/died``
and ``/time_out`` counts, ``Metrics/final_distance_to_goal``), as 0-d tensors: Isaac Lab calls
``.item()`` on some of them, we do not, so a step never waits for the device.

Physics. Isaac Lab simulates the drone in PhysX; here one rigid body (the Crazyflie's mass and
principal inertia) is integrated with PhysX's own scheme, for all envs at once:

    v   += dt * (R(q) (0, 0, T) / m + g)             linear: semi-implicit (symplectic) Euler,
    p   += dt * v                                     the new velocity moves the position
    w   += dt * I^-1 tau                              body-frame angular velocity, external moment
    L    = I w;  L' = L - dt * w x L;  L' *= |L|/|L'| gyroscopic term, explicit, with the momentum
    w    = I^-1 L'                                    magnitude kept (PhysX's enableGyroscopicForces;
                                                      the Crazyflie asset turns it on)
    q    = q (x) exp(w dt / 2);  q /= |q|             exact rotation for the step's w, renormalised

Without the rescale, explicit Euler on w x Iw grows |L| by a factor (1 + dt^2 |w|^2 sin^2) per
step; with it |L| is kept exactly and, for a 6 rad/s torque-free tumble at dt = 0.01 s, the
world-frame angular momentum stays within 2 % and the energy within 3 % over 2 s (first-order
scheme, as PhysX's; ``tests/envs/test_quadcopter.py`` checks both). Quaternions are (w, x, y, z), Isaac Lab's
order. Not modelled: the ground (the band terminates the episode before the drone reaches it),
rotor spin (the four rotors' spins cancel), drag and PhysX's velocity damping.

Physical constants. Isaac Lab reads mass and inertia from the Crazyflie USD (``cf2x.usd``), which
is not in its sources; we use the Crazyflie 2.x published values: mass 27 g (the firmware's
``CF_MASS``, the crazyflie_ros URDF), inertia from Förster's system identification of the
Crazyflie 2.0 (ETH Zürich, 2015). ``thrust_to_weight`` 1.9 and ``moment_scale`` 0.01 are Isaac
Lab's task settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from islab.envs import render
from islab.envs.base import DirectRLEnv, DirectRLEnvCfg

REWARD_TERMS = ("lin_vel", "ang_vel", "distance_to_goal")
# islab's success measure (Isaac Lab defines none for this task): the drone flew to its goal and hovered
# there until the time limit. 0.25 m: a few Crazyflie sizes (9 cm motor to motor), well inside the
# 0.8 m over which the distance reward falls off.
SUCCESS_DISTANCE = 0.25  # [m]


@dataclass
class QuadcopterEnvCfg(DirectRLEnvCfg):
    # env (Isaac Lab's QuadcopterEnvCfg)
    num_envs: int = 4096
    sim_dt: float = 1 / 100
    decimation: int = 2
    episode_length_s: float = 10.0
    observation_space: int = 12
    action_space: int = 4
    # robot: Crazyflie 2.x (published values; see the module docstring)
    mass: float = 0.027  # [kg]
    inertia: tuple[float, float, float] = (1.657171e-5, 1.6655602e-5, 2.9261652e-5)  # [kg m^2], principal
    gravity: float = 9.81  # [m/s^2], Isaac Lab's SimulationCfg default (0, 0, -9.81)
    thrust_to_weight: float = 1.9
    moment_scale: float = 0.01  # [N m] at |action| = 1
    # reset: Isaac Lab's CRAZYFLIE_CFG init_state and its goal sampling
    init_pos: tuple[float, float, float] = (0.0, 0.0, 0.5)  # [m]
    goal_xy_range: tuple[float, float] = (-2.0, 2.0)  # [m]
    goal_z_range: tuple[float, float] = (0.5, 1.5)  # [m]
    # termination: the drone "died" outside min_height < z < max_height
    min_height: float = 0.1  # [m]
    max_height: float = 2.0  # [m]
    # reward scales
    lin_vel_reward_scale: float = -0.05
    ang_vel_reward_scale: float = -0.01
    distance_to_goal_reward_scale: float = 15.0
    distance_to_goal_tanh_scale: float = 0.8  # [m]


def quat_mul(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Hamilton product of (w, x, y, z) quaternions, batched over the leading dimension."""
    qw, qv = q[:, :1], q[:, 1:]
    pw, pv = p[:, :1], p[:, 1:]
    w = qw * pw - (qv * pv).sum(dim=1, keepdim=True)
    v = qw * pv + pw * qv + torch.linalg.cross(qv, pv, dim=1)
    return torch.cat((w, v), dim=1)


def rotation_matrix(q: torch.Tensor) -> torch.Tensor:
    """R(q) [N, 3, 3] of unit (w, x, y, z) quaternions: body-frame vectors to world, v_w = R v_b."""
    w, x, y, z = q.unbind(1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz, wx, wy, wz = x * y, x * z, y * z, w * x, w * y, w * z
    rows = (
        1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy),
        2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx),
        2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy),
    )  # fmt: skip
    return torch.stack(rows, dim=1).view(-1, 3, 3)


class QuadcopterEnv(DirectRLEnv):
    cfg: QuadcopterEnvCfg
    # the rigid body, its goal, the last action and its thrust/moment, the episode's reward sums
    state_tensors = (
        *DirectRLEnv.state_tensors, "root_state", "desired_pos_w", "actions", "thrust", "moment", "episode_sums",
        "final_distance_to_goal",
    )  # fmt: skip
    success_measure: ClassVar[str] = (
        f"the episode reached its time limit without leaving the height band, ending within {SUCCESS_DISTANCE} m "
        "of its goal"
    )

    def episode_success(self, terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
        """Per env, whether an episode that ended in this step succeeded (islab-train play and eval
        count it); the step's reset has just recorded where it ended (``final_distance_to_goal``)."""
        return truncated & ~terminated & (self.final_distance_to_goal < SUCCESS_DISTANCE)

    def _draw(self, env_id: int, width: int, height: int) -> render.Canvas:
        """Two panels: from the side (x, z; the height band dashed) and from above (x, y); in each
        the goal (green) and the drone: its arms to the four rotors and its thrust axis (orange),
        drawn ten times the Crazyflie's size so that its attitude shows."""
        cfg = self.cfg
        pos = self.root_pos_w[env_id].tolist()
        goal = self.desired_pos_w[env_id].tolist()
        rotation = rotation_matrix(self.root_quat_w[env_id : env_id + 1])[0].cpu()
        arm = 0.35  # [m] drawn (the real arm is ~0.046 m)
        rotors = (rotation @ torch.tensor([[arm, 0, 0], [-arm, 0, 0], [0, arm, 0], [0, -arm, 0.0]]).T).T.tolist()
        up = (rotation[:, 2] * 0.4).tolist()
        half = width // 2
        span = cfg.goal_xy_range[1] + 0.8
        side = render.Canvas(half, height, (-span, span), (-0.2, cfg.max_height + 0.3))
        top = render.Canvas(width - half, height, (-span, span), (-span, span))
        side.line((-span, 0.0), (span, 0.0), 2, render.INK)  # the ground
        for bound in (cfg.min_height, cfg.max_height):
            side.dashed_hline(bound, render.ACCENT)
        for canvas, (a, b) in ((side, (0, 2)), (top, (0, 1))):  # the two projections: (x, z), (x, y)
            canvas.disk(goal[a], goal[b], 5, render.GOAL)
            centre = (pos[a], pos[b])
            for rotor in rotors:
                end = (pos[a] + rotor[a], pos[b] + rotor[b])
                canvas.line(centre, end, 3, render.INK)
                canvas.disk(*end, 4, render.BLUE)
            canvas.line(centre, (pos[a] + up[a], pos[b] + up[b]), 2, render.ACCENT)
        frame = render.Canvas(width, height, (0, 1), (0, 1))
        frame.pixels[:, :half], frame.pixels[:, half:] = side.pixels, top.pixels
        frame.pixels[:, half] = render.GRID
        return frame

    def _setup_scene(self) -> None:
        n, dev, cfg = self.num_envs, self.device, self.cfg
        # Root state, one row per env: position (3), orientation (4, w first), world-frame linear
        # velocity (3), body-frame angular velocity (3). Isaac Lab's names for the views.
        self.root_state = torch.zeros(n, 13, device=dev)
        self.root_pos_w = self.root_state[:, 0:3]
        self.root_quat_w = self.root_state[:, 3:7]
        self.root_lin_vel_w = self.root_state[:, 7:10]
        self.root_ang_vel_b = self.root_state[:, 10:13]
        self.desired_pos_w = torch.zeros(n, 3, device=dev)
        self.actions = torch.zeros(n, cfg.action_space, device=dev)
        self.thrust = torch.zeros(n, 1, device=dev)  # [N], along the body z axis
        self.moment = torch.zeros(n, 3, device=dev)  # [N m], body frame
        self.episode_sums = torch.zeros(len(REWARD_TERMS), n, device=dev)
        # per env: distance to the goal when its last episode ended (NaN before the first end);
        # the per-env form of Isaac Lab's Metrics/final_distance_to_goal, for evaluations
        self.final_distance_to_goal = torch.full((n,), math.nan, device=dev)
        self.robot_weight = cfg.mass * cfg.gravity
        self._inertia = torch.tensor(cfg.inertia, device=dev)
        self._inv_inertia = 1.0 / self._inertia
        self._gravity_w = torch.tensor([0.0, 0.0, -cfg.gravity], device=dev)
        self._down_w = torch.tensor([0.0, 0.0, -1.0], device=dev)
        self._default_root_state = torch.zeros(13, device=dev)
        self._default_root_state[0:3] = torch.tensor(cfg.init_pos)
        self._default_root_state[3] = 1.0  # identity orientation
        self.root_state[:] = self._default_root_state
        self._height_bounds = (cfg.min_height, cfg.max_height)
        scales = (cfg.lin_vel_reward_scale, cfg.ang_vel_reward_scale, cfg.distance_to_goal_reward_scale)
        self._reward_scales = torch.tensor(scales, device=dev).unsqueeze(1) * self.step_dt  # [3, 1]
        (x_low, x_high), (z_low, z_high) = cfg.goal_xy_range, cfg.goal_z_range
        self._goal_low = torch.tensor((x_low, x_low, z_low), device=dev)
        self._goal_span = torch.tensor((x_high, x_high, z_high), device=dev) - self._goal_low
        self.max_episode_length_s = cfg.episode_length_s

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, torch.Tensor], dict]:
        result = super().reset(seed, options)
        self.final_distance_to_goal.fill_(math.nan)  # reset() ends no episode
        return result

    # -- actions --------------------------------------------------------------------------------

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        cfg = self.cfg
        torch.clamp(actions, -1.0, 1.0, out=self.actions)
        # thrust_to_weight * weight * (a0 + 1) / 2, folded into one multiply-add
        half_max_thrust = 0.5 * cfg.thrust_to_weight * self.robot_weight
        torch.add(self.actions[:, :1], 1.0, out=self.thrust).mul_(half_max_thrust)
        torch.mul(self.actions[:, 1:], cfg.moment_scale, out=self.moment)

    def _apply_action(self) -> None:
        """The wrench is held over the decimation substeps; ``_physics_step`` reads it."""

    # -- physics --------------------------------------------------------------------------------

    def _physics_step(self) -> None:
        """One PhysX-style substep of the rigid body (see the module docstring for the equations)."""
        dt, cfg = self.physics_dt, self.cfg
        q = self.root_quat_w
        w, x, y, z = q.unbind(1)
        # body z axis in world coordinates: the third column of R(q); thrust acts along it
        body_z = torch.stack((2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)), dim=1)
        acc = body_z * (self.thrust / cfg.mass) + self._gravity_w
        self.root_lin_vel_w.add_(acc, alpha=dt)
        self.root_pos_w.add_(self.root_lin_vel_w, alpha=dt)

        omega = self.root_ang_vel_b
        omega.addcmul_(self.moment, self._inv_inertia, value=dt)
        momentum = omega * self._inertia
        new_momentum = momentum - dt * torch.linalg.cross(omega, momentum, dim=1)
        # keep |L| (PhysX): the explicit step alone would inflate it every substep
        ratio = momentum.norm(dim=1, keepdim=True) / new_momentum.norm(dim=1, keepdim=True).clamp_min(1e-12)
        torch.mul(new_momentum * ratio, self._inv_inertia, out=omega)

        # q <- q (x) exp(omega dt / 2): (cos |h|, sin|h| h/|h|) with h = omega dt / 2; sinc keeps
        # omega = 0 exact (torch.sinc(t) = sin(pi t) / (pi t))
        half = omega * (0.5 * dt)
        angle = half.norm(dim=1, keepdim=True)
        delta = torch.cat((torch.cos(angle), half * torch.sinc(angle / math.pi)), dim=1)
        rotated = quat_mul(q, delta)
        torch.div(rotated, rotated.norm(dim=1, keepdim=True), out=q)  # re-normalise: rounding drifts

    # -- task -----------------------------------------------------------------------------------

    def distance_to_goal(self) -> torch.Tensor:
        """[N] distance from each drone to its goal, in metres."""
        return torch.linalg.vector_norm(self.desired_pos_w - self.root_pos_w, dim=1)

    def _get_observations(self) -> dict[str, torch.Tensor]:
        # R^T applied to three world vectors at once: velocity, goal offset, gravity direction
        # (Isaac Lab: root_lin_vel_b, subtract_frame_transforms(...) for the goal, projected_gravity_b)
        world = torch.stack(
            (self.root_lin_vel_w, self.desired_pos_w - self.root_pos_w, self._down_w.expand(self.num_envs, 3)),
            dim=2,
        )  # [N, 3, 3], one vector per column
        body = torch.bmm(rotation_matrix(self.root_quat_w).transpose(1, 2), world)
        lin_vel_b, goal_b, gravity_b = body.unbind(2)
        return {"policy": torch.cat((lin_vel_b, self.root_ang_vel_b, gravity_b, goal_b), dim=1)}

    def _get_rewards(self) -> torch.Tensor:
        cfg = self.cfg
        # |v_b|^2 = |v_w|^2: a rotation keeps lengths, so the body-frame transform is skipped
        lin_vel = self.root_lin_vel_w.square().sum(dim=1)
        ang_vel = self.root_ang_vel_b.square().sum(dim=1)
        mapped = 1 - torch.tanh(self.distance_to_goal() / cfg.distance_to_goal_tanh_scale)
        terms = torch.stack((lin_vel, ang_vel, mapped)).mul_(self._reward_scales)  # each term x scale x step_dt
        self.episode_sums.add_(terms)
        return terms.sum(dim=0)

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        torch.ge(self.episode_length_buf, self.max_episode_length - 1, out=self.reset_time_outs)
        height = self.root_pos_w[:, 2]
        low, high = self._height_bounds
        torch.logical_or(height < low, height > high, out=self.reset_terminated)
        return self.reset_terminated, self.reset_time_outs

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        # Logging first: the finished episodes' sums and where they ended (Isaac Lab's keys)
        sums = self.episode_sums.index_select(1, env_ids).mean(dim=1) / self.max_episode_length_s
        log = {f"Episode_Reward/{term}": sums[i] for i, term in enumerate(REWARD_TERMS)}
        log["Episode_Termination/died"] = self.reset_terminated.index_select(0, env_ids).count_nonzero()
        log["Episode_Termination/time_out"] = self.reset_time_outs.index_select(0, env_ids).count_nonzero()
        final_distance = self.distance_to_goal().index_select(0, env_ids)
        self.final_distance_to_goal.index_copy_(0, env_ids, final_distance)
        log["Metrics/final_distance_to_goal"] = final_distance.mean()
        self.extras.setdefault("log", {}).update(log)
        self.episode_sums.index_fill_(1, env_ids, 0.0)

        super()._reset_idx(env_ids)
        if len(env_ids) == self.num_envs:
            # Isaac Lab: spread the episode clocks so that not every env times out in the same step
            self.episode_length_buf = torch.randint(
                0, self.max_episode_length, (self.num_envs,), generator=self.generator, device=self.device
            )
        self.actions.index_fill_(0, env_ids, 0.0)
        # new goals: x, y uniform in goal_xy_range, z in goal_z_range (one draw for all three)
        k = len(env_ids)
        goals = torch.rand(k, 3, generator=self.generator, device=self.device)
        self.desired_pos_w.index_copy_(0, env_ids, torch.addcmul(self._goal_low, goals, self._goal_span))
        self.root_state.index_copy_(0, env_ids, self._default_root_state.expand(k, 13))

    def _reset_done(self, done: torch.Tensor) -> None:
        """``_reset_idx`` for the envs ``done`` marks, as masked tensor operations (no host sync):
        the same log keys (means over the finished envs, 0 where none), random numbers drawn for
        every env and kept where an env finished."""
        column = done.unsqueeze(1)
        as_float = done.to(self.episode_sums.dtype)
        per_episode = 1.0 / torch.clamp(as_float.sum(), min=1.0)
        sums = torch.mv(self.episode_sums, as_float) * (per_episode / self.max_episode_length_s)
        log = {f"Episode_Reward/{term}": sums[i] for i, term in enumerate(REWARD_TERMS)}
        log["Episode_Termination/died"] = (self.reset_terminated & done).sum()
        log["Episode_Termination/time_out"] = (self.reset_time_outs & done).sum()
        distance = self.distance_to_goal()
        self.final_distance_to_goal.copy_(torch.where(done, distance, self.final_distance_to_goal))
        log["Metrics/final_distance_to_goal"] = torch.dot(distance, as_float) * per_episode
        self.extras.setdefault("log", {}).update(log)
        self.episode_sums.masked_fill_(done, 0.0)

        self._reset_done_buffers(done)
        # Isaac Lab spreads the episode clocks when every env resets at once (_reset_idx)
        spread = torch.randint(
            0, self.max_episode_length, (self.num_envs,), generator=self.generator, device=self.device
        )
        self.episode_length_buf.copy_(torch.where(done.all(), spread, self.episode_length_buf))
        self.actions.masked_fill_(column, 0.0)
        goals = torch.rand(self.num_envs, 3, generator=self.generator, device=self.device)
        new_goals = torch.addcmul(self._goal_low, goals, self._goal_span)
        self.desired_pos_w.copy_(torch.where(column, new_goals, self.desired_pos_w))
        self.root_state.copy_(torch.where(column, self._default_root_state, self.root_state))


def median_final_distance(env: QuadcopterEnv, policy: Callable[[torch.Tensor], torch.Tensor], seed: int = 123) -> float:
    """Evaluate a policy: the median over envs of the distance to the goal when each env's first
    episode ends. All episodes start together at step 0 (no spread clocks), so every env flies
    the full 10 s unless it leaves the height band first. ``policy`` maps observations [N, 12]
    to actions [N, 4]. Used by the learning test and ``scripts/quadcopter_eval.py``."""
    obs, _ = env.reset(seed=seed)
    env.episode_length_buf.zero_()
    first = torch.full((env.num_envs,), math.nan, device=env.device)
    seen = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    with torch.no_grad():
        for _ in range(env.max_episode_length):
            obs, *_ = env.step(policy(obs["policy"]))
            new = env.reset_buf & ~seen
            first[new] = env.final_distance_to_goal[new]
            seen |= env.reset_buf
    return float(first.median())
