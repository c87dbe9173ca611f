"""mjlab's registry as islab tasks (the ``[mjlab]`` extra): one bridge, every task mjlab registers.

mjlab (PyPI ``mjlab``) is Isaac Lab's manager-based API on MuJoCo Warp; importing ``mjlab.tasks``
registers its tasks (``Mjlab-...``) in mjlab's own registry (``mjlab.tasks.registry``:
``list_tasks``, ``load_env_cfg``, ``load_rl_cfg``). Importing this package registers each of them
with gymnasium the way every islab task registers, so the launcher, the task probe and the ranks
treat them like Cartpole:

* ``entry_point`` is the bridge env (``mjlab_env.MjlabEnv``: mjlab's ``ManagerBasedRlEnv`` in our
  env contract); ``env_cfg_entry_point`` is ``MjlabTaskCfg`` bound to the mjlab task id;
* ``rsl_rl_cfg_entry_point`` is mjlab's own registered runner config; rl_games' and skrl's are
  derived from it (``agent_configs``);
* ``islab_unavailable`` says why a task cannot be trained here (image observations, a motion file
  mjlab does not ship); the launcher lists such tasks and refuses them with that reason.

The launcher knows these ids without importing anything from pyproject's ``islab.tasks`` entry
points (``"<id>" = "islab.tasks.mjlab [mjlab]"``); a test checks that list equals mjlab's. Adding
a task mjlab gained in a new version: one line there.
"""

from functools import partial

import gymnasium as gym
import mjlab.tasks  # noqa: F401 -- registers mjlab's tasks in mjlab's registry
from mjlab.tasks.registry import list_tasks

from islab.tasks.mjlab import agent_configs
from islab.tasks.mjlab.mjlab_env import MjlabTaskCfg, unavailable_reason

for _task_id in list_tasks():
    gym.register(
        id=_task_id,
        entry_point=f"{__name__}.mjlab_env:MjlabEnv",
        disable_env_checker=True,
        kwargs={
            "env_cfg_entry_point": partial(MjlabTaskCfg, mjlab_task=_task_id),
            "rl_games_cfg_entry_point": partial(agent_configs.rl_games, _task_id),
            "rsl_rl_cfg_entry_point": partial(agent_configs.rsl_rl, _task_id),
            "skrl_cfg_entry_point": partial(agent_configs.skrl, _task_id),
            "islab_unavailable": unavailable_reason(_task_id),
        },
    )
