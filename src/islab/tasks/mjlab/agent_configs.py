"""Agent configs of an mjlab task, for each library, from mjlab's own registered runner config.

rsl_rl: mjlab's ``load_rl_cfg(task)``, as the train_cfg dict our rsl_rl adapter takes. What
changes from ``asdict(load_rl_cfg(task))`` (the dict mjlab's own ``train`` hands to rsl_rl), and why:

* ``obs_groups``: mjlab's "actor" group is our env's "policy" (``GROUP_NAMES``).
* ``None`` optional model entries (cnn_cfg, distribution_cfg, rnn_*) are dropped, as
  ``MjlabOnPolicyRunner.__init__`` drops them: rsl_rl's MLPModel would receive them as kwargs.
* mjlab's launcher-only keys (wandb, resume/load_*, experiment and run names, upload_model, the
  runner class) are dropped: islab owns run directories, resume and checkpoints.
* ``logger: tensorboard`` (mjlab's default is wandb, which needs an account);
  ``init_at_random_ep_len: true`` is what mjlab's train passes to ``runner.learn``.

rl_games and skrl: Isaac Lab's PPO layout for each library with mjlab's numbers carried over:
network sizes and activation, learning rate and its KL-adaptive schedule, gamma, lambda, clip,
epochs, minibatches, rollout length, entropy and value-loss coefficients, gradient clipping,
input normalization and the initial action noise. What cannot carry over is in docs/MJLAB.md.
Imports mjlab (through the registry); run by the task probe and by ranks, never by the launcher.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from islab.tasks.mjlab.mjlab_env import GROUP_NAMES, MjlabTaskCfg

LAUNCHER_ONLY_KEYS = (
    "experiment_name", "run_name", "wandb_project", "wandb_tags", "resume", "load_run", "load_checkpoint",
    "upload_model", "class_name",
)  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def rsl_rl(task_id: str) -> dict[str, Any]:
    from mjlab.tasks.registry import load_rl_cfg

    cfg = _plain(asdict(load_rl_cfg(task_id)))
    for key in LAUNCHER_ONLY_KEYS:
        cfg.pop(key, None)
    if cfg.get("clip_actions") is None:
        cfg.pop("clip_actions", None)  # not an rsl_rl key; mjlab's env wrapper clips when it is set
    else:
        raise NotImplementedError(f"{task_id}: mjlab's clip_actions is not supported by islab's rsl_rl env yet")
    for model in ("actor", "critic"):
        section = cfg[model]
        for key in ("cnn_cfg", "distribution_cfg"):
            if section.get(key) is None:
                section.pop(key, None)
        if section.get("rnn_type") is None:
            for key in ("rnn_type", "rnn_hidden_dim", "rnn_num_layers"):
                section.pop(key, None)
    cfg["obs_groups"] = {
        model: [GROUP_NAMES.get(group, group) for group in groups] for model, groups in cfg["obs_groups"].items()
    }
    cfg["logger"] = "tensorboard"
    cfg["init_at_random_ep_len"] = True
    return cfg


def _ppo(task_id: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """mjlab's rsl_rl config, its algorithm section and the minibatch size it implies at the
    task's default number of envs (rl_games takes a size, rsl_rl and skrl a count)."""
    cfg = rsl_rl(task_id)
    algorithm = cfg["algorithm"]
    batch = MjlabTaskCfg.num_envs * cfg["num_steps_per_env"]
    return cfg, algorithm, max(1, batch // algorithm["num_mini_batches"])


def _init_std(cfg: dict[str, Any]) -> float:
    return float((cfg["actor"].get("distribution_cfg") or {}).get("init_std", 1.0))


def rl_games(task_id: str) -> dict[str, Any]:
    cfg, algorithm, minibatch_size = _ppo(task_id)
    actor = cfg["actor"]
    adaptive = algorithm.get("schedule") == "adaptive"
    return {
        "params": {
            "seed": cfg["seed"],
            "torch_threads": 0,
            "env": {"clip_observations": 100.0, "clip_actions": 1.0},
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {
                "name": "actor_critic",
                "separate": False,  # rl_games' shared trunk: the actor's layers (see docs/MJLAB.md)
                "space": {
                    "continuous": {
                        "mu_activation": "None",
                        "sigma_activation": "None",
                        "mu_init": {"name": "default"},
                        "sigma_init": {"name": "const_initializer", "val": math.log(_init_std(cfg))},
                        "fixed_sigma": True,
                    }
                },
                "mlp": {
                    "units": list(actor["hidden_dims"]),
                    "activation": actor["activation"],
                    "d2rl": False,
                    "initializer": {"name": "default"},
                    "regularizer": {"name": "None"},
                },
            },
            "load_checkpoint": False,
            "load_path": "",
            "config": {
                "name": task_id.lower().replace("-", "_"),
                "env_name": "rlgpu",
                "device": "cuda:0",
                "device_name": "cuda:0",
                "multi_gpu": False,
                "ppo": True,
                "mixed_precision": False,
                "normalize_input": bool(actor.get("obs_normalization", False)),
                "normalize_value": True,
                "value_bootstrap": True,
                "num_actors": -1,
                "reward_shaper": {"scale_value": 1.0},
                "normalize_advantage": True,
                "gamma": algorithm["gamma"],
                "tau": algorithm["lam"],
                "learning_rate": algorithm["learning_rate"],
                "lr_schedule": "adaptive" if adaptive else "None",
                "schedule_type": "legacy",
                "kl_threshold": algorithm.get("desired_kl") or 0.01,
                "score_to_win": 20000,
                "max_epochs": cfg["max_iterations"],
                "save_best_after": 100,
                "save_frequency": cfg.get("save_interval", 50),
                "grad_norm": algorithm["max_grad_norm"],
                "entropy_coef": algorithm["entropy_coef"],
                "truncate_grads": True,
                "e_clip": algorithm["clip_param"],
                "horizon_length": cfg["num_steps_per_env"],
                "minibatch_size": minibatch_size,
                "mini_epochs": algorithm["num_learning_epochs"],
                "critic_coef": algorithm["value_loss_coef"],
                "clip_value": bool(algorithm["use_clipped_value_loss"]),
                "seq_length": 4,
                "bounds_loss_coef": 0.0,
                "torch_compile": False,
            },
        }
    }


def _skrl_model(layers: list[int], activation: str, source: str, output: str) -> dict[str, Any]:
    return {"network": [{"name": "net", "input": source, "layers": list(layers), "activations": activation}],
            "output": output}  # fmt: skip


def skrl(task_id: str) -> dict[str, Any]:
    cfg, algorithm, _ = _ppo(task_id)
    actor, critic = cfg["actor"], cfg["critic"]
    adaptive = algorithm.get("schedule") == "adaptive"
    scaler = "RunningStandardScaler"
    policy = {
        "class": "GaussianMixin", "clip_actions": False, "clip_log_std": True, "min_log_std": -20.0,
        "max_log_std": 2.0, "initial_log_std": math.log(_init_std(cfg)),
        **_skrl_model(actor["hidden_dims"], actor["activation"], "OBSERVATIONS", "ACTIONS"),
    }  # fmt: skip
    value = {"class": "DeterministicMixin", "clip_actions": False,
             **_skrl_model(critic["hidden_dims"], critic["activation"], "STATES", "ONE")}  # fmt: skip
    return {
        "seed": cfg["seed"],
        # The value net reads the critic group (skrl's "states"), as mjlab's critic does.
        "models": {"separate": True, "policy": policy, "value": value},
        "memory": {"class": "RandomMemory", "memory_size": -1},
        "agent": {
            "class": "PPO",
            "rollouts": cfg["num_steps_per_env"],
            "learning_epochs": algorithm["num_learning_epochs"],
            "mini_batches": algorithm["num_mini_batches"],
            "discount_factor": algorithm["gamma"],
            "gae_lambda": algorithm["lam"],
            "learning_rate": algorithm["learning_rate"],
            "learning_rate_scheduler": "KLAdaptiveLR" if adaptive else None,
            "learning_rate_scheduler_kwargs": {"kl_threshold": algorithm.get("desired_kl") or 0.01} if adaptive else {},
            "observation_preprocessor": scaler if actor.get("obs_normalization") else None,
            "observation_preprocessor_kwargs": None,
            "state_preprocessor": scaler if critic.get("obs_normalization") else None,
            "state_preprocessor_kwargs": None,
            "value_preprocessor": None,
            "value_preprocessor_kwargs": None,
            "random_timesteps": 0,
            "learning_starts": 0,
            "grad_norm_clip": algorithm["max_grad_norm"],
            "ratio_clip": algorithm["clip_param"],
            "value_clip": algorithm["clip_param"],
            "clip_predicted_values": bool(algorithm["use_clipped_value_loss"]),
            "entropy_loss_scale": algorithm["entropy_coef"],
            "value_loss_scale": algorithm["value_loss_coef"],
            "kl_threshold": 0.0,
            "rewards_shaper_scale": 1.0,
            "time_limit_bootstrap": False,
            "experiment": {
                "directory": task_id.lower().replace("-", "_"),
                "experiment_name": "",
                "write_interval": "auto",
                "checkpoint_interval": "auto",
            },
        },
        "trainer": {
            "class": "SequentialTrainer",
            "timesteps": cfg["max_iterations"] * cfg["num_steps_per_env"],
            "environment_info": "log",
            "headless": True,
            "disable_progressbar": True,
        },
    }
