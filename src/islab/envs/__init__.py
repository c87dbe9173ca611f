"""Isaac-style vectorized environments: the ``DirectRLEnv`` base every task builds on.

``make_env(task_id, num_envs, device, seed)`` builds one batched environment for a rank: it
imports the task's package (which runs its ``gym.register``, as Isaac Lab's task packages do)
and builds the env from the gymnasium spec's ``entry_point`` and ``env_cfg_entry_point``.
``render_mode="rgb_array"`` (gymnasium's and Isaac Lab's word) makes ``env.render()`` return
frames; ``viewer`` says which envs they show (``islab.envs.render.ViewerCfg``). Without it no
renderer exists at all (mjlab builds its MuJoCo renderer only when asked).
"""

from __future__ import annotations

import os

import gymnasium

from islab.envs.base import DirectRLEnv, DirectRLEnvCfg
from islab.envs.render import ViewerCfg
from islab.tasks import import_task
from islab.tasks.probe import load_object as load_entry_point

__all__ = ["DirectRLEnv", "DirectRLEnvCfg", "ViewerCfg", "load_entry_point", "make_env"]


def make_env(
    task_id: str,
    num_envs: int,
    device: str = "cpu",
    seed: int | None = None,
    render_mode: str | None = None,
    viewer: ViewerCfg | None = None,
) -> DirectRLEnv:
    if render_mode is not None:
        # Before the task's package is imported: MuJoCo reads MUJOCO_GL once, when it is imported.
        from islab.envs.gl_backend import choose_mujoco_gl

        choose_mujoco_gl(str(device), os.environ)
    import_task(task_id)
    spec = gymnasium.spec(task_id)
    cfg = load_entry_point(spec.kwargs["env_cfg_entry_point"])(num_envs=num_envs, seed=seed)
    if viewer is not None:
        cfg.viewer = viewer
    # render_mode only when asked, so an env class of a user's task without the argument still builds
    extra = {} if render_mode is None else {"render_mode": render_mode}
    return load_entry_point(spec.entry_point)(cfg, device=device, **extra)
