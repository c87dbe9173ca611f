"""Agent hyper-parameters: one YAML per library and task, in that library's own format.

A task's ``agents/<lib>_ppo_cfg.yaml`` (named by its ``<lib>_cfg_entry_point``, see
``islab.tasks``) is what Isaac Lab ships for each library, so a user can carry their tuned file
over unchanged. :func:`load_agent_config` finds it through the task registry, reads it and applies
the command-line overrides (:mod:`islab.spec.overrides`: dotted ``key=value``, typos refused).

Torch-free: the launcher validates overrides before anything starts, and every rank applies them.
Not pure: the task registry may read a task's registration in a child process
(:mod:`islab.tasks.metadata`), so the launcher loads agent configs at the edge of resolution
(:mod:`islab.resolve.edge`), never from the planner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from islab.spec.overrides import AgentConfigError, apply_overrides, parse_override
from islab.tasks import TASKS, agent_config_path

__all__ = ["AgentConfigError", "apply_overrides", "load_agent_config", "parse_override"]


def load_agent_config(lib: str, task_id: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The task's ``lib`` agent config with ``overrides`` applied; AgentConfigError names what to change."""
    if task_id not in TASKS:
        raise AgentConfigError("task", f"unknown task {task_id!r}")
    path = agent_config_path(lib, task_id)
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except FileNotFoundError:
        raise AgentConfigError("lib", f"there is no {lib} agent config for task {task_id} (expected {path})") from None
    if not isinstance(config, dict):
        raise AgentConfigError(str(path), "an agent config must be a YAML mapping")
    return apply_overrides(config, overrides)
