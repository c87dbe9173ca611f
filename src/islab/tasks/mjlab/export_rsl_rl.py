"""mjlab's registered rsl_rl runner config, as the train_cfg dict our rsl_rl adapter takes.

``python -m islab.tasks.mjlab.export_rsl_rl TASK`` prints it as YAML; that output, with a header,
is ``agents/<folder>/rsl_rl_ppo_cfg.yaml`` (the launcher cannot import mjlab to read it, so it is
written out once and a test checks it still equals the installed mjlab's). Imports mjlab.

What changes from mjlab's ``asdict(load_rl_cfg(task))``, the dict mjlab's own ``train`` hands
to rsl_rl, and why:
* ``obs_groups``: mjlab's "actor" group is our env's "policy" (``GROUP_NAMES``).
* ``None`` optional model entries (cnn_cfg, distribution_cfg, rnn_*) are dropped, as
  ``MjlabOnPolicyRunner.__init__`` drops them: rsl_rl's MLPModel would receive them as kwargs.
* mjlab's launcher-only keys (wandb, resume/load_*, experiment and run names, upload_model,
  the runner class) are dropped: islab owns run directories, resume and checkpoints.
* ``logger: tensorboard`` (mjlab's default is wandb, which needs an account);
  ``init_at_random_ep_len: true`` is what mjlab's train passes to ``runner.learn``.
* tuples become lists so ``yaml.safe_dump``/``safe_load`` round-trip it.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

import yaml

from islab.tasks.mjlab.mjlab_env import GROUP_NAMES

LAUNCHER_ONLY_KEYS = (
    "experiment_name", "run_name", "wandb_project", "wandb_tags", "resume", "load_run", "load_checkpoint",
    "upload_model", "class_name",
)  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def rsl_rl_train_cfg(task_id: str) -> dict[str, Any]:
    import mjlab.tasks  # noqa: F401 -- registers the tasks
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m islab.tasks.mjlab.export_rsl_rl TASK", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump(rsl_rl_train_cfg(argv[0]), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
