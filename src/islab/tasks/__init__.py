"""The tasks: one folder each, registered with gymnasium as Isaac Lab registers its own.

A task is a package ``islab/tasks/<name>/`` (or any installed package announced under the
``islab.tasks`` entry-point group)::

    <name>/__init__.py         gym.register(id=..., entry_point=..., kwargs={env cfg, agent configs})
    <name>/<name>_env.py       <Name>EnvCfg (observation_space, action_space, num_envs) and <Name>Env
    <name>/agents/*.yaml       one agent config per library, in that library's own format

A task that needs an optional extra says so in its entry point (``"islab.tasks.mjlab [mjlab]"``):
it is listed without the extra and refused before launch. mjlab's own registry becomes islab tasks
through one bridge package (``islab/tasks/mjlab/``).

Importing this package is cheap and torch-free: :data:`TASKS` knows ids and packages from entry
points; sizes and agent configs are read from the real registration in a child process and cached
(:mod:`islab.tasks.metadata`). A rank imports the task package itself (``import_task``).
"""

from __future__ import annotations

from pathlib import Path

from islab.libs.registry import LIBRARIES
from islab.tasks.registry import (
    TASKS,
    TaskInfo,
    TaskRegistrationError,
    add_task_module,
    default_num_envs,
    import_task,
    missing_extra,
    module_file,
)

__all__ = [
    "TASKS",
    "TaskInfo",
    "TaskRegistrationError",
    "add_task_module",
    "agent_config_path",
    "default_num_envs",
    "import_task",
    "libraries_with_agent_config",
    "missing_extra",
]


def agent_config_path(lib: str, task_id: str) -> Path:
    """The YAML of the task's ``<lib>_cfg_entry_point``: its own file when the registration names a
    YAML, else the config it names written out under the cache (see :mod:`islab.tasks.probe`). A
    task that registers none for ``lib`` gets where it would be by convention: ``agents/<lib>_ppo_cfg.yaml``."""
    info = TASKS[task_id]
    path = info.agent_configs.get(lib)
    if path:
        return Path(path)
    return module_file(info.package).parent / "agents" / f"{lib}_ppo_cfg.yaml"


def libraries_with_agent_config(task_id: str) -> list[str]:
    return [lib for lib in LIBRARIES if agent_config_path(lib, task_id).is_file()]
