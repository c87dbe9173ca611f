"""``islab-train sweep SWEEP.yaml --dry-run [--json]``: every trial, printed, nothing started.

Paste-safe like the launcher's dry run (:mod:`islab.spec.text`): every line is a ``#`` comment
or one trial's command, quoted by :func:`islab.plan.dry_run.shell_line`, so copying the whole
output into bash runs the trials one after another.
"""

from __future__ import annotations

import json
from typing import Any

from islab.spec.issues import mask_env
from islab.spec.text import comment
from islab.sweep.trials import SweepPlan, Trial, config_label


def trial_plain(trial: Trial, plan: SweepPlan) -> dict[str, Any]:
    return {
        "id": trial.id,
        "config_index": trial.config_index,
        "config": dict(trial.config),
        "seed": trial.seed,
        "resources": {"cpu": plan.resources.cpu, "gpu": plan.resources.gpu},
        "argv": list(trial.argv),
        "cwd": trial.cwd,  # None: the sweep's working directory
        "env": mask_env(trial.env),
        "command": trial.command,
    }


def format_json(plan: SweepPlan) -> str:
    return json.dumps(
        {
            "sweep_dir": plan.sweep_dir,
            "searcher": plan.searcher,
            "configs": plan.configs,
            "max_concurrent": plan.max_concurrent,
            "trials": [trial_plain(trial, plan) for trial in plan.trials],
        },
        indent=2,
    )


def format_text(plan: SweepPlan, source: str) -> str:
    lines = [
        comment(
            f"sweep {source}: {len(plan.trials)} trial(s) = {plan.configs} configuration(s) x seeds, "
            f"searcher {plan.searcher}"
        ),
        comment(
            f"each trial: {plan.resources.describe()}; at most "
            f"{plan.max_concurrent or 'as many as fit'} at once; sweep directory {plan.sweep_dir}"
        ),
    ]
    for trial in plan.trials:
        chosen = "chosen by Optuna while the sweep runs" if plan.searcher == "optuna" else config_label(trial.config)
        lines += ["", comment(f"trial {trial.id}: {chosen}, seed {trial.seed}"), trial.command]
    return "\n".join(lines)
