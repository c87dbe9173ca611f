"""The tasks: one folder each, registered with gymnasium as Isaac Lab registers its own.

A task is a package ``islab/tasks/<name>/`` (or any installed package announced under the
``islab.tasks`` entry-point group)::

    <name>/__init__.py         gym.register(id=..., entry_point=..., kwargs={env cfg, agent configs})
    <name>/<name>_env.py       <Name>EnvCfg (observation_space, action_space, num_envs) and <Name>Env
    <name>/agents/*.yaml       one agent config per library, in that library's own format

A task that needs an optional extra says so with ``kwargs={"islab_extra": "<extra>"}`` (mjlab's
robots in ``islab/tasks/mjlab/``): it is listed without the extra and refused before launch.

Importing this package is cheap and torch-free: :data:`TASKS` reads the registrations statically
(:mod:`islab.tasks.registry`), so the launcher validates ``--task`` and finds agent configs
before anything heavy is imported. A rank imports the task package itself (``import_task``).
"""

from __future__ import annotations

from pathlib import Path

from islab.libs.registry import LIBRARIES
from islab.tasks.registry import (
    TASKS,
    TaskInfo,
    TaskRegistrationError,
    add_task_module,
    import_task,
    missing_extra,
    module_file,
    resource_path,
)

__all__ = [
    "TASKS",
    "TaskInfo",
    "TaskRegistrationError",
    "add_task_module",
    "agent_config_path",
    "import_task",
    "libraries_with_agent_config",
    "missing_extra",
]


def agent_config_path(lib: str, task_id: str) -> Path:
    """The YAML that ``<lib>_cfg_entry_point`` of the task's registration names. A task that
    registers none for ``lib`` gets where it would be by convention: ``agents/<lib>_ppo_cfg.yaml``."""
    info = TASKS[task_id]
    spec = info.agent_configs.get(LIBRARIES[lib].cfg_entry_point_key) if lib in LIBRARIES else None
    if spec:
        return resource_path(spec)
    return module_file(info.package).parent / "agents" / f"{lib}_ppo_cfg.yaml"


def libraries_with_agent_config(task_id: str) -> list[str]:
    return [lib for lib in LIBRARIES if agent_config_path(lib, task_id).is_file()]
