"""A vectorized environment with the shape of Isaac Lab's ``DirectRLEnv``.

Isaac Lab's direct workflow keeps *all* environments of a process in batched tensors on one
device and never loops over them in Python. A task fills in six hooks and the base class owns the
step loop:

    step(actions):
        _pre_physics_step(actions)            # once per policy step: scale / clip actions
        repeat cfg.decimation times:
            _apply_action(); _physics_step()  # physics runs at sim_dt, the policy at decimation*sim_dt
        episode_length_buf += 1
        terminated, truncated = _get_dones()
        reward = _get_rewards()
        _reset_idx(envs that finished)        # auto-reset inside step, as Isaac Lab does
        obs = _get_observations()
        return obs, reward, terminated, truncated, extras

Speed. A step is a few dozen small element-wise tensor operations, so on a CPU its cost is
mostly per-operation dispatch, not arithmetic: at 4096 envs one op costs a few microseconds
whatever it computes. Tasks therefore write their hooks with few ops, in place, into buffers
allocated once (``out=``, ``addcmul_``).

No host syncs. On a GPU, any op whose result the host must see (``.item()``, ``bool(t)``,
``nonzero()``, indexing with a boolean mask) waits for every queued kernel; once per env step
that serializes the rollout. ``step`` therefore never branches on data: the auto-reset is a masked
update of every env (``_reset_done``: ``torch.where``, random numbers drawn for every env, kept
where an env finished) and the episode statistics are masked means reported at every step with
how many episodes they cover (``EPISODES_ENDED``). ``python -m islab.worker.host_syncs`` counts what is
left, in our code and in each library's (docs/benchmarks.md).

A task may also offer a fused step (``_make_fast_step``): the same computation written as one
pure element-wise function and handed to ``torch.compile``, which fuses it into one C++ (CPU) or
Triton (GPU) kernel. Turn it on with ``cfg.compile_step = True`` or ``ISLAB_ENV_COMPILE=1``. It is
opt-in because the first compile takes seconds to tens of seconds (cached in /tmp/torchinductor_*
afterwards); each call also pays 15-30 µs of torch.compile's own overhead (guards, wrappers), the
largest single cost left at 4096 envs on a CPU. If compiling fails the env warns and stays eager.
It runs the same equations and draws the same random numbers in the same order, so it returns
what the hooks return up to float rounding (``tests/envs/test_envs.py`` checks it).

``_physics_step`` stands in for ``sim.step()``: Isaac Lab advances PhysX there; our tasks
integrate their own equations. Anything that accepts an Isaac Lab task (skrl's
``wrap_env(env, wrapper="isaaclab")``, the rsl_rl and rl_games adapters in ``islab.libs``) accepts
these environments, and the other way round.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
import torch

from islab.envs.render import Canvas, ViewerCfg, rendered_env_ids, tile


@dataclass
class DirectRLEnvCfg:
    """What every direct task configures; tasks subclass it and add their own fields."""

    num_envs: int = 4096
    sim_dt: float = 1 / 120
    decimation: int = 2
    episode_length_s: float = 5.0
    observation_space: int = 0
    action_space: int = 0
    seed: int | None = None
    # Fuse the pre-reset part of step() with torch.compile (see the module docstring). None: read
    # ISLAB_ENV_COMPILE (1/true/yes = on); the default is off, because the first compile is slow.
    compile_step: bool | None = None
    # What render() shows (Isaac Lab's DirectRLEnvCfg.viewer): which env, how many, the frame size.
    viewer: ViewerCfg = field(default_factory=ViewerCfg)


COMPILE_VARIABLE = "ISLAB_ENV_COMPILE"


def compile_requested(cfg: DirectRLEnvCfg, environ: dict[str, str] | None = None) -> bool:
    if cfg.compile_step is not None:
        return cfg.compile_step
    value = (os.environ if environ is None else environ).get(COMPILE_VARIABLE, "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


# The extras key with how many episodes ended in a step (a 0-d device tensor): consumers average
# ``extras["log"]`` over the steps where it is > 0, which is Isaac Lab's "log only at a reset".
EPISODES_ENDED = "episodes_ended"


def counted_step(extras: dict[str, Any]) -> torch.Tensor:
    """1.0 (a tensor, on the env's device) where a step's ``extras["log"]`` describes ended episodes,
    else 0.0: what consumers weight the log's values by. Envs without ``EPISODES_ENDED`` log only
    when episodes end (Isaac Lab's): their steps always count."""
    ended = extras.get(EPISODES_ENDED)
    return (ended > 0).float() if isinstance(ended, torch.Tensor) else torch.ones(())


StepResult = tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


class DirectRLEnv:
    """Base class: batched buffers, the step loop, episode bookkeeping. See the module docstring."""

    metadata: dict[str, Any] = {"render_modes": [None, "rgb_array"]}  # noqa: RUF012 -- gymnasium convention
    # The tensors that are the env's state between two steps (``state_dict``): each task adds its
    # own (``state_tensors = (*DirectRLEnv.state_tensors, "my_buffer")``). Buffers recomputed in
    # every step from these (observations, rewards) need not be listed.
    state_tensors: tuple[str, ...] = ("episode_length_buf", "episode_return_buf", "_done_bytes")

    def __init__(self, cfg: DirectRLEnvCfg, device: str | torch.device = "cpu", render_mode: str | None = None) -> None:
        if render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.cfg = cfg
        self.render_mode = render_mode
        self.device = torch.device(device)
        self.num_envs = cfg.num_envs
        self.physics_dt = cfg.sim_dt
        self.step_dt = cfg.sim_dt * cfg.decimation
        self.max_episode_length = math.ceil(cfg.episode_length_s / self.step_dt)
        # per instance, as Isaac Lab sets it: a video plays at the policy's rate
        self.metadata = {**type(self).metadata, "render_fps": 1.0 / self.step_dt}

        self.single_observation_space = gymnasium.spaces.Dict(
            {"policy": gymnasium.spaces.Box(-np.inf, np.inf, shape=(cfg.observation_space,))}
        )
        self.single_action_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(cfg.action_space,))
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, self.num_envs)

        self.generator = torch.Generator(device=self.device)
        self.seed(cfg.seed)

        n = self.num_envs
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=self.device)
        # terminated, truncated, either: three rows of one buffer, so one op can fill all three
        # (bytes viewed as bools, so a compiled step can write 0/1 bytes and need no conversion op)
        self._done_bytes = torch.zeros(3, n, dtype=torch.uint8, device=self.device)
        self._done_bufs = self._done_bytes.view(torch.bool)
        self.reset_terminated, self.reset_time_outs, self.reset_buf = self._done_bufs.unbind(0)
        self.reward_buf = torch.zeros(n, device=self.device)
        # Running episode return per env, reported in extras["log"] when episodes finish.
        self.episode_return_buf = torch.zeros(n, device=self.device)
        self.common_step_counter = 0
        self.extras: dict[str, Any] = {}
        self._setup_scene()
        self._fast_step: Callable[[torch.Tensor], StepResult] | None = None
        self._fast_step_proven = False
        if compile_requested(cfg):
            self._fast_step = self._make_fast_step()
            if self._fast_step is None:
                warnings.warn(f"{type(self).__name__} has no compiled step; running eager", stacklevel=2)

    @property
    def compiled(self) -> bool:
        """Whether ``step`` runs the task's torch.compile'd fast path."""
        return self._fast_step is not None

    # -- gymnasium-style API ------------------------------------------------------------------

    @property
    def unwrapped(self) -> DirectRLEnv:
        return self

    def seed(self, seed: int | None = None) -> int | None:
        if seed is not None:
            self.generator.manual_seed(int(seed))
        return seed

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        if seed is not None:
            self.seed(seed)
        self._reset_idx(torch.arange(self.num_envs, device=self.device))
        self.extras = {}
        return self._get_observations(), self.extras

    def step(self, action: torch.Tensor) -> StepResult:
        action = action.to(self.device)
        if self._fast_step is not None:
            if self._fast_step_proven:
                return self._fast_step(action)
            try:  # the first call compiles; it fails before touching any state
                result = self._fast_step(action)
                self._fast_step_proven = True
                return result
            except Exception as error:  # no C++ compiler, unsupported op, ...: stay correct, eager
                warnings.warn(f"torch.compile of the env step failed; running eager: {error}", stacklevel=2)
                self._fast_step = None
        reward = self._advance(action)
        self.common_step_counter += 1
        self.reward_buf = reward

        self.extras = {}
        # Sync-free episode bookkeeping: no nonzero() and no "did any env finish?" branch (each
        # would make a GPU wait). The statistics are masked means, reported at every step with the
        # number of episodes they cover (``EPISODES_ENDED``; 0: nothing ended, the values are 0).
        self._report_ended_episodes(self.reset_buf)
        self._reset_done(self.reset_buf)
        return self._get_observations(), self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def _report_ended_episodes(self, done: torch.Tensor) -> None:
        """``extras["log"]`` episode_return / episode_length: the means over the envs that ``done``
        ends (0 where none), and ``extras[EPISODES_ENDED]``, how many: device tensors, no read."""
        ended = done.sum()
        per_episode = 1.0 / torch.clamp(ended, min=1).to(self.episode_return_buf.dtype)
        self.extras[EPISODES_ENDED] = ended
        self.extras["log"] = {
            "episode_return": torch.dot(self.episode_return_buf, done.to(self.episode_return_buf.dtype)) * per_episode,
            "episode_length": (self.episode_length_buf * done).sum().to(per_episode.dtype) * per_episode,
        }

    def _reset_done(self, done: torch.Tensor) -> None:
        """Reset the envs that ``done`` marks, inside ``step``. Tasks that can should override this
        with masked tensor operations (``torch.where``; draw random numbers for every env), which
        never wait for the device. This default serves tasks written against Isaac Lab's
        ``_reset_idx(env_ids)``: it needs the ids on the host, one device read per step."""
        reset_env_ids = done.nonzero().squeeze(-1)
        if reset_env_ids.numel() > 0:
            self._reset_idx(reset_env_ids)

    def _advance(self, action: torch.Tensor) -> torch.Tensor:
        """Everything in ``step`` before the auto-reset: actions, physics substeps, episode clock,
        dones (into ``reset_terminated`` / ``reset_time_outs`` / ``reset_buf``), rewards, running
        return: the hooks, in Isaac Lab's order."""
        self._pre_physics_step(action)
        for _ in range(self.cfg.decimation):
            self._apply_action()
            self._physics_step()

        self.episode_length_buf += 1
        terminated, truncated = self._get_dones()
        if terminated is not self.reset_terminated:  # tasks may write the buffers directly
            self.reset_terminated.copy_(terminated)
        if truncated is not self.reset_time_outs:
            self.reset_time_outs.copy_(truncated)
        torch.logical_or(self.reset_terminated, self.reset_time_outs, out=self.reset_buf)
        reward = self._get_rewards()
        self.episode_return_buf += reward
        return reward

    # -- state, for checkpoints ---------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The env's state between two steps as CPU tensors (``torch.load(weights_only=True)``
        reads it back on any device): ``state_tensors`` and the step counter. With the RNG state
        (``generator``, saved beside it by the checkpoint) a loaded env steps on exactly as this
        one would."""
        state: dict[str, Any] = {name: getattr(self, name).detach().to("cpu", copy=True) for name in self.state_tensors}
        state["common_step_counter"] = int(self.common_step_counter)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of ``state_dict``, copied into the existing buffers (tasks keep views of them).
        Raises ValueError, changing nothing, when a tensor is missing or has another shape (a
        checkpoint of another task or env count)."""
        for name in self.state_tensors:
            saved, here = state.get(name), getattr(self, name)
            if not isinstance(saved, torch.Tensor) or saved.shape != here.shape:
                shape = None if not isinstance(saved, torch.Tensor) else tuple(saved.shape)
                raise ValueError(f"env state {name!r}: saved {shape}, this env has {tuple(here.shape)}")
        for name in self.state_tensors:
            getattr(self, name).copy_(state[name])
        self.common_step_counter = int(state["common_step_counter"])

    def _make_fast_step(self) -> Callable[[torch.Tensor], StepResult] | None:
        """A task's fused replacement for ``step`` (``compile_step``), or None if it has none. It
        must return exactly what the hooks return, auto-reset and RNG draws included (test it)."""
        return None

    def close(self) -> None:
        """Nothing to release: all state lives in tensors."""

    @property
    def viewer(self) -> ViewerCfg:
        """What ``render`` shows (``cfg.viewer``)."""
        return self.cfg.viewer

    def render(self, recompute: bool = False) -> np.ndarray | None:
        """Isaac Lab's ``render``: with ``render_mode="rgb_array"`` a ``(height, width, 3)`` uint8
        frame of ``cfg.viewer``'s envs as they are now (several tiled), else None. ``recompute`` is
        Isaac Lab's (force a render the simulator already did); a diagram is always drawn anew."""
        del recompute
        if self.render_mode != "rgb_array":
            return None
        frames = [self.render_env(env_id) for env_id in rendered_env_ids(self.viewer, self.num_envs)]
        return frames[0] if len(frames) == 1 else tile(frames)

    def render_env(self, env_id: int) -> np.ndarray:
        """One env's frame (``cfg.viewer.width`` x ``height``), drawn by the task's ``_draw``."""
        return self._draw(env_id, self.viewer.width, self.viewer.height).pixels

    # -- hooks a task implements ----------------------------------------------------------------

    def _setup_scene(self) -> None:
        """Allocate the task's state tensors."""
        raise NotImplementedError

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        raise NotImplementedError

    def _apply_action(self) -> None:
        raise NotImplementedError

    def _physics_step(self) -> None:
        """Advance the simulation by one ``physics_dt`` (Isaac Lab: ``sim.step()``)."""
        raise NotImplementedError

    def _get_observations(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _get_rewards(self) -> torch.Tensor:
        raise NotImplementedError

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _draw(self, env_id: int, width: int, height: int) -> Canvas:
        """A diagram of env ``env_id`` now, on a new canvas (``islab.envs.render``)."""
        raise NotImplementedError(f"{type(self).__name__} draws no frames")

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        """Reset the given envs; tasks call ``super()._reset_idx(env_ids)`` first."""
        self.episode_length_buf.index_fill_(0, env_ids, 0)
        self.episode_return_buf.index_fill_(0, env_ids, 0.0)

    def _reset_done_buffers(self, done: torch.Tensor) -> None:
        """The base part of a masked reset (``_reset_done``): zero the finished envs' episode clock
        and running return. Tasks' ``_reset_done`` call it first."""
        self.episode_length_buf.masked_fill_(done, 0)
        self.episode_return_buf.masked_fill_(done, 0.0)
