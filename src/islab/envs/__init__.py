"""Isaac-style vectorized tasks, registered with gymnasium as Isaac Lab registers its own.

``make_env(task_id, num_envs, device, seed)`` builds one batched environment for a rank.
"""

from __future__ import annotations

import importlib

import gymnasium

from islab.envs.base import DirectRLEnv, DirectRLEnvCfg
from islab.tasks import TASKS, is_mjlab

__all__ = ["DirectRLEnv", "DirectRLEnvCfg", "load_entry_point", "make_env"]

for _info in TASKS.values():
    if _info.task_id not in gymnasium.registry and not is_mjlab(_info.task_id):
        gymnasium.register(
            id=_info.task_id,
            entry_point=_info.env_entry_point,
            disable_env_checker=True,
            kwargs={"env_cfg_entry_point": _info.cfg_entry_point},
        )


def load_entry_point(entry_point: str) -> type:
    module_name, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def make_env(task_id: str, num_envs: int, device: str = "cpu", seed: int | None = None) -> DirectRLEnv:
    if is_mjlab(task_id):  # mjlab builds its own env from its registry (islab.envs.mjlab_env)
        from islab.envs.mjlab_env import make_mjlab_env

        return make_mjlab_env(task_id, num_envs, device, seed)  # type: ignore[return-value]
    info = TASKS[task_id]
    cfg = load_entry_point(info.cfg_entry_point)(num_envs=num_envs, seed=seed)
    return load_entry_point(info.env_entry_point)(cfg, device=device)
