"""mjlab's robots (the ``[mjlab]`` extra) as islab tasks: one more task package of the registry.

mjlab (PyPI ``mjlab``) is Isaac Lab's manager-based API on MuJoCo Warp; it registers its own tasks
(``Mjlab-...``) in its own registry when ``mjlab.tasks`` is imported, which costs torch, Warp and
every task's config. Here the tasks we ship agent configs for are registered the way every islab
task is (``gym.register`` below, ids in pyproject's ``islab.tasks`` entry points), so the launcher
lists and checks them statically like Cartpole, without mjlab installed:

* ``entry_point`` is the bridge env (``mjlab_env.MjlabEnv``: mjlab's ``ManagerBasedRlEnv`` in our
  env contract); ``env_cfg_entry_point`` is a small config naming the mjlab task id, with the
  literal sizes and default number of envs the launcher shows;
* ``islab_extra`` names the extra (and the module it installs) the task needs: without it the
  launcher refuses the task before anything starts (``islab.tasks.missing_extra``);
* agent configs are one folder per robot under ``agents/``: rsl_rl's is mjlab's own registered
  runner config written out by ``python -m islab.tasks.mjlab.export_rsl_rl TASK`` (a test checks
  it still equals the installed mjlab's); rl_games' and skrl's start from Isaac Lab's configs
  for the same robots (each file says what changed and why).

Adding another mjlab task: one more ``gym.register`` here, its config class in ``mjlab_env.py``,
its agent folder, and its id in pyproject.
"""

import gymnasium as gym

from . import agents

gym.register(
    id="Mjlab-Cartpole-Balance",
    entry_point=f"{__name__}.mjlab_env:MjlabEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}.mjlab_env:CartpoleBalanceCfg",
        "islab_extra": "mjlab",
        "rl_games_cfg_entry_point": f"{agents.__name__}:cartpole/rl_games_ppo_cfg.yaml",
        "rsl_rl_cfg_entry_point": f"{agents.__name__}:cartpole/rsl_rl_ppo_cfg.yaml",
        "skrl_cfg_entry_point": f"{agents.__name__}:cartpole/skrl_ppo_cfg.yaml",
    },
)

gym.register(
    id="Mjlab-Velocity-Flat-Unitree-Go1",
    entry_point=f"{__name__}.mjlab_env:MjlabEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}.mjlab_env:Go1FlatCfg",
        "islab_extra": "mjlab",
        "rl_games_cfg_entry_point": f"{agents.__name__}:go1_flat/rl_games_ppo_cfg.yaml",
        "rsl_rl_cfg_entry_point": f"{agents.__name__}:go1_flat/rsl_rl_ppo_cfg.yaml",
        "skrl_cfg_entry_point": f"{agents.__name__}:go1_flat/skrl_ppo_cfg.yaml",
    },
)

gym.register(
    id="Mjlab-Velocity-Flat-Unitree-G1",
    entry_point=f"{__name__}.mjlab_env:MjlabEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": f"{__name__}.mjlab_env:G1FlatCfg",
        "islab_extra": "mjlab",
        "rl_games_cfg_entry_point": f"{agents.__name__}:g1_flat/rl_games_ppo_cfg.yaml",
        "rsl_rl_cfg_entry_point": f"{agents.__name__}:g1_flat/rsl_rl_ppo_cfg.yaml",
        "skrl_cfg_entry_point": f"{agents.__name__}:g1_flat/skrl_ppo_cfg.yaml",
    },
)
