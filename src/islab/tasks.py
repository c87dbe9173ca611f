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
    "Islab-Quadcopter-v0": TaskInfo(
        task_id="Islab-Quadcopter-v0",
        env_entry_point="islab.envs.quadcopter_env:QuadcopterEnv",
        cfg_entry_point="islab.envs.quadcopter_env:QuadcopterEnvCfg",
        agent_config_name="quadcopter",
        observation_size=12,
        action_size=4,
        default_num_envs=4096,
    ),
}


def configs_dir() -> Path:
    """Where configs/ lives: inside the installed wheel, or at the repository root (editable)."""
    packaged = Path(__file__).with_name("configs")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "configs"


def agent_config_path(lib: str, task_id: str) -> Path:
    return configs_dir() / "agents" / lib / f"{TASKS[task_id].agent_config_name}.yaml"


def libraries_with_agent_config(task_id: str) -> list[str]:
    return [lib for lib in LIBRARIES if agent_config_path(lib, task_id).is_file()]
