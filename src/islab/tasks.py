"""The task registry as plain data, importable without torch.

The launcher validates ``--task`` against this table before anything starts, so it must not pay
for ``import torch``. ``islab.envs`` registers the same ids with gymnasium (as Isaac Lab does with
``gym.register(id=..., entry_point=..., kwargs={"env_cfg_entry_point": ...})``) for the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LIBRARIES = ("rl_games", "rsl_rl", "skrl")


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    env_entry_point: str  # "module:Class" of the DirectRLEnv subclass
    cfg_entry_point: str  # "module:Class" of its config dataclass
    agent_config_name: str  # configs/agents/<lib>/<agent_config_name>.yaml
    observation_size: int
    action_size: int
    default_num_envs: int


TASKS: dict[str, TaskInfo] = {
    "Islab-Cartpole-v0": TaskInfo(
        task_id="Islab-Cartpole-v0",
        env_entry_point="islab.envs.cartpole:CartpoleEnv",
        cfg_entry_point="islab.envs.cartpole:CartpoleEnvCfg",
        agent_config_name="cartpole",
        observation_size=4,
        action_size=1,
        default_num_envs=4096,
    ),
}


MJLAB_ENV_ENTRY_POINT = "islab.envs.mjlab_env:MjlabEnv"


def _add_mjlab_tasks() -> None:
    """With the [mjlab] extra, mjlab's registered tasks too: their ids read statically from the
    installed mjlab (``islab.mjlab_tasks``: ~20 ms, torch-free), their agent configs from
    ``islab/mjlab_tasks/agents``. Sizes are known only for the tasks that have configs."""
    from islab.mjlab_tasks import DEFAULT_NUM_ENVS, KNOWN_SIZES, mjlab_task_ids

    for task_id in mjlab_task_ids():
        observation_size, action_size = KNOWN_SIZES.get(task_id, (0, 0))
        TASKS.setdefault(
            task_id,
            TaskInfo(task_id, MJLAB_ENV_ENTRY_POINT, "mjlab.tasks.registry:load_env_cfg", task_id,
                     observation_size, action_size, DEFAULT_NUM_ENVS),
        )  # fmt: skip


_add_mjlab_tasks()


def is_mjlab(task_id: str) -> bool:
    return task_id in TASKS and TASKS[task_id].env_entry_point == MJLAB_ENV_ENTRY_POINT


def configs_dir() -> Path:
    """Where configs/ lives: inside the installed wheel, or at the repository root (editable)."""
    packaged = Path(__file__).with_name("configs")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "configs"


def agent_config_path(lib: str, task_id: str) -> Path:
    if is_mjlab(task_id):
        from islab.mjlab_tasks import agent_config_path as mjlab_agent_config_path

        return mjlab_agent_config_path(lib, task_id)
    return configs_dir() / "agents" / lib / f"{TASKS[task_id].agent_config_name}.yaml"


def libraries_with_agent_config(task_id: str) -> list[str]:
    return [lib for lib in LIBRARIES if agent_config_path(lib, task_id).is_file()]
