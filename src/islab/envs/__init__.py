"""Isaac-style vectorized environments: the ``DirectRLEnv`` base every task builds on.

``make_env(task_id, num_envs, device, seed)`` builds one batched environment for a rank: it
imports the task's package (which runs its ``gym.register``, as Isaac Lab's task packages do)
and builds the env from the gymnasium spec's ``entry_point`` and ``env_cfg_entry_point``.
"""

from __future__ import annotations

import gymnasium

from islab.envs.base import DirectRLEnv, DirectRLEnvCfg
from islab.tasks import import_task
from islab.tasks.probe import load_object as load_entry_point

__all__ = ["DirectRLEnv", "DirectRLEnvCfg", "load_entry_point", "make_env"]


def make_env(task_id: str, num_envs: int, device: str = "cpu", seed: int | None = None) -> DirectRLEnv:
    import_task(task_id)
    spec = gymnasium.spec(task_id)
    cfg = load_entry_point(spec.kwargs["env_cfg_entry_point"])(num_envs=num_envs, seed=seed)
    return load_entry_point(spec.entry_point)(cfg, device=device)
