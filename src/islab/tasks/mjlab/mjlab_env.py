"""An mjlab task (MuJoCo Warp, Isaac Lab's manager-based API) in our env contract.

mjlab's ``ManagerBasedRlEnv`` already steps like Isaac Lab's: batched tensors on one device,
``step(actions) -> (obs, reward, terminated, truncated, extras)`` with the auto-reset inside,
``episode_length_buf``, ``max_episode_length``, ``extras["log"]``. What differs, and what
``MjlabEnv`` does about it:

* Observation groups are named "actor" and "critic"; ours (Isaac Lab's) are "policy" and
  "critic". The actor group becomes "policy"; the critic group stays "critic" (privileged: Go1
  flat has 48 actor and 72 critic values). skrl reads "critic" as the state; rsl_rl gets both
  groups through ``obs_groups``; rl_games trains on "policy" only.
* Spaces are mjlab's own types; ours are gymnasium ``Box`` spaces (a ``Dict`` of groups).
* ``extras["log"]`` holds mjlab's per-term episode sums; we add ``episode_return`` and
  ``episode_length`` of the episodes that ended in this step (0 where none) and
  ``extras["episodes_ended"]``, as our own envs report them (the adapters' mean return and skrl's
  logging read them).
* Build: our config (``MjlabTaskCfg``: the mjlab task id, ``num_envs``, ``seed``) ->
  ``load_env_cfg(task)``, ``cfg.scene.num_envs``, ``cfg.seed`` = the rank's seed (mjlab seeds
  Python, numpy, torch and Warp with it), ``ManagerBasedRlEnv(cfg, device)``. The observation and
  action sizes of a manager-based env exist only once it is built (its managers evaluate every
  term), so ``islab-train tasks`` shows none for mjlab tasks.
* RNG: mjlab draws from the global torch generator (and Warp's), so ``generator`` is None and the
  islab checkpoint's torch RNG state covers it.
* Warp compiles its kernels on first use (Go1: ~25 s once); point ``WARP_CACHE_PATH`` at a
  directory that survives between runs. ``MJLAB_WARP_QUIET=1`` silences its per-kernel lines.
* Frames: with ``render_mode="rgb_array"`` mjlab builds its MuJoCo offscreen renderer
  (``OffscreenRenderer``, what its own train/play scripts record with) and ``render()`` returns
  its picture: env ``viewer.env_index`` with ``viewer.num_envs - 1`` neighbours in one scene
  (mjlab's ``env_idx`` and ``max_extra_envs``), ``viewer.width`` x ``height``. Without it no
  renderer and no OpenGL context exist. ``MUJOCO_GL`` is chosen before mjlab is imported
  (``islab.envs.gl_backend``); a context that cannot be opened is an error saying what to install.
* On a CPU rank of a machine without the CUDA driver, Warp's "Could not find or load the NVIDIA
  CUDA driver" warning is moved from stderr (the console) to stdout (the rank log), see
  :func:`init_warp`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
import torch

from islab.envs.base import EPISODES_ENDED
from islab.envs.render import ViewerCfg

os.environ.setdefault("MJLAB_WARP_QUIET", "1")  # before mjlab configures Warp at import

# Written by Warp's native library (warp/native/cuda_util.cpp, init_cuda_driver) with fprintf(stderr)
# when dlopen finds no libcuda.so / libcuda.so.1. Runtime() calls it through wp_init -> cuda_init
# unconditionally: neither warp.config.log_level nor the warp.config.quiet that mjlab sets (gone
# from Warp 1.19) reaches it, and Warp reads no environment variable for it.
WARP_NO_DRIVER = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver"

# mjlab's observation groups -> ours. Our env contract (Isaac Lab's) names the actor's group
# "policy"; the critic's (privileged) group keeps its name, which skrl reads as the state.
GROUP_NAMES = {"actor": "policy", "critic": "critic"}


@dataclass
class MjlabTaskCfg:
    """Which mjlab task to build, and how many envs with which seed (``functools.partial`` of it
    with ``mjlab_task`` is each task's ``env_cfg_entry_point``)."""

    mjlab_task: str = ""
    # Envs per rank when --num-envs is not given: mjlab's own default is 4096 per GPU, far too
    # many for a CPU rank (Go1 steps at ~100-200 env steps/s per core).
    num_envs: int = 64
    seed: int | None = None
    viewer: ViewerCfg = field(default_factory=ViewerCfg)  # what render() shows (mjlab: cfg.viewer)


def unavailable_reason(task_id: str) -> str | None:
    """Why islab cannot train ``task_id`` (read from its env config, without building it), or None."""
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(task_id)
    extra_groups = sorted(set(cfg.observations) - set(GROUP_NAMES))
    if extra_groups:
        return (
            f"its observation groups {extra_groups} (camera images) have no place in islab's env contract, "
            "which maps only mjlab's actor and critic groups"
        )
    for name, command in (cfg.commands or {}).items():
        if getattr(command, "motion_file", None) == "":
            return (
                f"its {name!r} command replays a motion file (.npz) that mjlab does not ship "
                "(mjlab's tracking tasks download one from a W&B registry)"
            )
    return None


def init_warp(device: str) -> None:
    """Start Warp's runtime now (``wp.init``; mjlab would on building the env). On a CPU rank, Warp's
    missing-CUDA-driver warning is news to no one and, on stderr, it reached the console by rank 0's
    default; so what Warp's native init writes to file descriptor 2 is caught, that one warning
    goes to stdout (the rank log keeps it -- where the worker's tee never saw it, as native code
    writes past ``sys.stderr``) and anything else back to stderr. On a GPU rank the warning
    means the run cannot work, so nothing is moved."""
    import warp as wp

    if torch.device(device).type != "cpu":
        wp.init()
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            wp.init()  # a no-op when Warp already runs: then nothing is written
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode("utf-8", errors="replace")
    for line in text.splitlines(keepends=True):
        sink = sys.stdout if line.startswith(WARP_NO_DRIVER) else sys.stderr
        sink.write(line)
        sink.flush()


def _box(space: Any) -> gymnasium.spaces.Box:
    shape = tuple(int(size) for size in space.shape)
    return gymnasium.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)


class MjlabEnv:
    """``ManagerBasedRlEnv`` seen as our ``DirectRLEnv``-shaped env (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": [None, "rgb_array"]}  # noqa: RUF012 -- gymnasium convention
    generator = None  # mjlab uses the global torch RNG; the checkpoint saves that

    def __init__(self, cfg: MjlabTaskCfg, device: str = "cpu", render_mode: str | None = None) -> None:
        import mjlab.tasks  # noqa: F401 -- registers mjlab's tasks
        from mjlab.envs import ManagerBasedRlEnv
        from mjlab.tasks.registry import load_env_cfg

        task_id, num_envs = cfg.mjlab_task, cfg.num_envs
        init_warp(str(device))
        env_cfg = load_env_cfg(task_id)
        env_cfg.scene.num_envs = num_envs
        env_cfg.seed = cfg.seed
        self.viewer = cfg.viewer
        env_cfg.viewer.env_idx = cfg.viewer.env_index
        env_cfg.viewer.max_extra_envs = cfg.viewer.num_envs - 1
        env_cfg.viewer.width, env_cfg.viewer.height = cfg.viewer.width, cfg.viewer.height
        self.task_id = task_id
        self.render_mode = render_mode
        self.env = _build(ManagerBasedRlEnv, env_cfg, str(device), render_mode, task_id)
        self.metadata = {**type(self).metadata, "render_fps": float(self.env.metadata.get("render_fps", 30.0))}
        self.cfg = self.env.cfg
        self.device = torch.device(device)
        self.num_envs = num_envs
        self.max_episode_length = int(self.env.max_episode_length)
        self.step_dt = float(self.env.step_dt)
        groups = self.env.single_observation_space.spaces
        unknown = set(groups) - set(GROUP_NAMES)
        if unknown or "actor" not in groups:
            raise NotImplementedError(f"{task_id}: observation groups {sorted(groups)}; islab maps only actor/critic")
        self.single_observation_space = gymnasium.spaces.Dict(
            {GROUP_NAMES[name]: _box(space) for name, space in groups.items()}
        )
        self.single_action_space = _box(self.env.single_action_space)
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, num_envs)
        self._episode_return = torch.zeros(num_envs, device=self.device)
        self.extras: dict[str, Any] = {}

    @property
    def unwrapped(self) -> MjlabEnv:
        return self

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length_buf = value  # rsl_rl randomizes it (init_at_random_ep_len)

    @property
    def common_step_counter(self) -> int:
        return self.env.common_step_counter  # drives mjlab's curricula

    def _obs(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {GROUP_NAMES[name]: value for name, value in obs.items()}

    def seed(self, seed: int | None = None) -> int | None:
        return None if seed is None else self.env.seed(int(seed))

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        obs, extras = self.env.reset(seed=seed, options=options)
        self._episode_return.zero_()
        self.extras = extras
        return self._obs(obs), extras

    def step(
        self, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        length_before = self.env.episode_length_buf + 1  # the auto-reset zeroes it for finished envs
        obs, reward, terminated, truncated, extras = self.env.step(action.to(self.device))
        self._episode_return += reward
        # masked means, no done.any() or boolean indexing: a step of ours never waits for the
        # device (islab.envs.base); 0 where no episode ended, with EPISODES_ENDED saying how many
        done = terminated | truncated
        as_float = done.to(self._episode_return.dtype)
        ended = done.sum()
        per_episode = 1.0 / torch.clamp(ended, min=1).to(as_float.dtype)
        log = extras.setdefault("log", {})
        log["episode_return"] = torch.dot(self._episode_return, as_float) * per_episode
        log["episode_length"] = torch.dot(length_before.to(as_float.dtype), as_float) * per_episode
        extras[EPISODES_ENDED] = ended
        self._episode_return.masked_fill_(done, 0.0)
        self.extras = extras
        return self._obs(obs), reward, terminated, truncated, extras

    def state_dict(self) -> dict[str, Any]:
        """Not saved: mjlab's physics (MuJoCo-Warp data, command and event managers) has no
        state-dict API, so a resumed mjlab run starts its envs from a reset. The episode
        statistics (the adapters') and the global torch RNG are still restored."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state  # see state_dict

    def render(self, recompute: bool = False) -> np.ndarray | None:
        """mjlab's frame (Isaac Lab's signature; mjlab's ``render`` takes no argument)."""
        del recompute
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _build(env_class: Any, env_cfg: Any, device: str, render_mode: str | None, task_id: str) -> Any:
    """mjlab's env; with a renderer that cannot open its OpenGL context, an error saying what to install."""
    if render_mode is None:
        return env_class(cfg=env_cfg, device=device)
    from islab.envs.gl_backend import VARIABLE, no_renderer_message

    try:
        return env_class(cfg=env_cfg, device=device, render_mode=render_mode)
    except Exception as error:  # mujoco's context creation raises several kinds (ImportError, RuntimeError, GLError)
        if not _renderer_failure(error):
            raise
        raise RuntimeError(no_renderer_message(task_id, os.environ.get(VARIABLE, ""), error)) from error


def _renderer_failure(error: BaseException) -> bool:
    """Whether building the env failed in MuJoCo's OpenGL context (not in the task itself)."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    text = f"{type(error).__name__}: {error}".lower()
    return any("gl_context" in f.filename or "/mujoco/" in f.filename or "opengl" in f.filename.lower()
               for f in frames) or any(word in text for word in ("egl", "osmesa", "opengl", "gl context"))  # fmt: skip
