"""``--logger wandb``: rank 0 logs every iteration's progress record to one Weights & Biases run.

One islab-side logger for every library path (rsl_rl, rl_games, skrl-torch, skrl-JAX) rather than
each library's own wandb support (rsl_rl's ``logger_type``, rl_games' and skrl's wandb configs):
those differ in what they log, name metrics differently, count steps differently (per rank, per
iteration or per timestep) and start a new wandb run on every resume. Ours logs the same progress
record the launcher's live view and ``curves.png`` read, with one step axis, the env steps of all
ranks since the run began (``job_env_steps``, carried across resumes by the checkpoint), into one
run per run directory (:func:`islab.rundir.wandb_run_id`), resumed with ``resume="allow"``.
TensorBoard stays what the libraries write.

Only rank 0 imports wandb: the other ranks never start its service process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from islab import rundir

if TYPE_CHECKING:
    from islab.libs.base import LibraryAdapter

DEFAULT_PROJECT = "islab-train"


def metrics_of(record: Mapping[str, Any]) -> dict[str, float]:
    """The wandb metrics of one progress record (None values left out: wandb would plot zeros)."""
    metrics: dict[str, Any] = {
        "iteration": record["iteration"],
        "env_steps": record.get("job_env_steps", record.get("env_steps")),
        "mean_return": record.get("mean_return"),
        "steps_per_s": record.get("steps_per_s"),
        **{f"loss/{name}": value for name, value in (record.get("losses") or {}).items()},
    }
    return {name: value for name, value in metrics.items() if value is not None}


class WandbLogger:
    """An iteration hook (``LibraryAdapter.iteration_hooks``) on rank 0."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        import wandb  # the [wandb] extra; the launcher refused --logger wandb without it

        self.run = wandb.init(
            id=rundir.wandb_run_id(run_dir),
            resume="allow",
            dir=str(run_dir),
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            name=Path(run_dir).resolve().name,
            config=dict(config),
        )

    def __call__(self, adapter: LibraryAdapter, iteration: int, max_iterations: int) -> None:
        record = adapter.last_progress
        if record is not None and record["iteration"] == iteration:
            metrics = metrics_of(record)
            # wandb's step is the env steps, not its own call counter: a resumed run continues the axis
            self.run.log(metrics, step=int(metrics["env_steps"]))

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)
