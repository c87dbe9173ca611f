"""Pendulum swing-up: gymnasium's ``Pendulum-v1`` as a batched-torch ``islab.envs.DirectRLEnv``.

Registered exactly as Isaac Lab registers its tasks: ordinary Python. islab-train's launcher
never imports it (no torch in the launcher); it reads the registration in a child process when it
needs the sizes or agent configs, and caches them until a file here changes. Importing this module
imports gymnasium only: the env module (and torch) is loaded when a rank builds the env from
``entry_point``.
"""

import gymnasium as gym

from . import agents

gym.register(
    id="Acme-Pendulum-SwingUp-v0",
    entry_point=f"{__name__}.pendulum_env:PendulumEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}.pendulum_env:PendulumEnvCfg",
        "rl_games_cfg_entry_point": f"{agents.__name__}:rl_games_ppo_cfg.yaml",
        "rsl_rl_cfg_entry_point": f"{agents.__name__}:rsl_rl_ppo_cfg.yaml",
        "skrl_cfg_entry_point": f"{agents.__name__}:skrl_ppo_cfg.yaml",
    },
)
