"""Around a launch of Isaac Lab's trainer: its run folder recorded, a preemption said as it is, the
way to go on.

Isaac Lab's train.py makes a run folder of its own at every start (``<cwd>/logs/<lib>/...``). When
the launch ends, the supervisor records which one this launch wrote
(:func:`islab.rundir.trainer_runs.record_trainer_run`): the folder of the job's own TensorBoard
events, else the folder rank 0 announced (Isaac Lab prints it for its Ray tuner; skrl writes no
events in a very short run).

A preempting signal (SIGTERM, SIGUSR1) reaches Isaac Lab's ranks as SIGINT (:mod:`islab.run.processes`):
Isaac Lab 3 ends its training loop on the KeyboardInterrupt and closes its environment, 2.x's
AppLauncher closes the app. Neither writes a checkpoint then: the run goes on from the newest one the
library wrote at its save interval (``--resume RUN_DIR``, through Isaac Lab's own resume options:
:mod:`islab.resolve.isaaclab_resume`); the iterations since are trained again. With such a
checkpoint islab-train exits 75 (preempted, resumable), without one 128 + signal.

Torch-free, like the launcher.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path

from islab.plan.launch_plan import LaunchPlan
from islab.rundir.trainer_runs import (
    TrainerCheckpoint,
    announced_folder,
    newest_checkpoint,
    record_trainer_run,
    run_folder_of_events,
)


def record_run_folder(plan: LaunchPlan, event_files: Iterable[Path | None], announced: Iterable[str]) -> Path | None:
    """Record this launch's trainer folder: that of the first known event file of the job's own,
    else the one rank 0's ``announced`` lines name. None (nothing recorded) when neither tells."""
    known = next((path for path in event_files if path is not None), None)
    folder = run_folder_of_events(known) if known is not None else announced_folder(announced)
    if folder is not None and plan.events_library is not None:
        record_trainer_run(plan.run_dir, folder, plan.events_library)
    return folder


def newest_of(plan: LaunchPlan) -> TrainerCheckpoint | None:
    """The checkpoint ``--resume RUN_DIR`` would continue from."""
    return newest_checkpoint(plan.run_dir, plan.events_library) if plan.events_library else None


def preemption_line(plan: LaunchPlan, received: int) -> tuple[str, bool]:
    """The line for a preempted launch of Isaac Lab's trainer, and whether it can be resumed."""
    name = signal.Signals(received).name
    run_dir = os.path.abspath(plan.run_dir)
    checkpoint = newest_of(plan)
    if checkpoint is None:
        return (
            f"islab-train: stopped by {name} (Isaac Lab's trainer ended on SIGINT) before it wrote a checkpoint; "
            f"run directory: {run_dir}",
            False,
        )
    return (
        f"islab-train: preempted by {name}: Isaac Lab's trainer ended on SIGINT; its newest checkpoint is "
        f"{checkpoint.path} (it writes one every save interval: what came after is trained again); "
        f"run directory: {run_dir}",
        True,
    )


def resume_hint(plan: LaunchPlan, command: str) -> str:
    """How to go on, after a failure or a stop: ``command`` when Isaac Lab left a checkpoint."""
    checkpoint = newest_of(plan)
    if checkpoint is None:
        return "islab-train: Isaac Lab's trainer wrote no checkpoint yet, so there is nothing to resume.\n"
    return f"islab-train: to resume this run (from Isaac Lab's checkpoint {checkpoint.path}):\n  {command}\n"
