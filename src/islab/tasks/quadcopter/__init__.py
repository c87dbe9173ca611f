"""Quadcopter: fly a Crazyflie to a goal (Isaac Lab's ``Isaac-Quadcopter-Direct-v0``, in torch).

Registered the way Isaac Lab registers its tasks; the launcher never imports it: the task probe
(``islab.tasks.probe``) does, in a child process, and its findings are cached.
"""

import gymnasium as gym

from . import agents

gym.register(
    id="Islab-Quadcopter-v0",
    entry_point=f"{__name__}.quadcopter_env:QuadcopterEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}.quadcopter_env:QuadcopterEnvCfg",
        "rl_games_cfg_entry_point": f"{agents.__name__}:rl_games_ppo_cfg.yaml",
        "rsl_rl_cfg_entry_point": f"{agents.__name__}:rsl_rl_ppo_cfg.yaml",
        "skrl_cfg_entry_point": f"{agents.__name__}:skrl_ppo_cfg.yaml",
    },
)
