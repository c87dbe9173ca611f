"""``islab-train tasks``' rows: every announced task with what its registration says (torch-free here).

Tasks whose extra is missing are listed from entry-point metadata alone (no sizes, no agent
configs: those come from importing the task, which needs the extra). A task whose import fails is
listed with the reason, so one broken third-party package does not hide the others.
"""

from __future__ import annotations

from typing import Any

from islab.tasks import libraries_with_agent_config
from islab.tasks.registry import TASKS, missing_extra


def task_rows() -> list[dict[str, Any]]:
    readable = [task_id for task_id in TASKS if missing_extra(task_id) is None]
    TASKS.describe(readable)  # one child process for every package not cached yet
    rows = []
    for task_id, entry in TASKS.entries.items():
        row: dict[str, Any] = {
            "task": task_id, "package": entry.package, "observation_size": None, "action_size": None,
            "default_num_envs": None, "agent_configs": None, "extra": entry.extra or None,
            "extra_missing": missing_extra(task_id) is not None, "error": None,
            "unavailable": None,
        }  # fmt: skip
        problem = None if row["extra_missing"] else TASKS.problem(task_id)
        if problem is not None:
            row["error"] = ". ".join(problem)
        elif not row["extra_missing"]:
            info = TASKS[task_id]
            row.update(
                observation_size=info.observation_size, action_size=info.action_size,
                default_num_envs=info.default_num_envs, agent_configs=libraries_with_agent_config(task_id),
                unavailable=info.unavailable,
            )  # fmt: skip
        rows.append(row)
    return rows
