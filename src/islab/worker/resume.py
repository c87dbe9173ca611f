"""Where a rank starts: fresh, from ``--resume``, or after an elastic restart.

Iterations count from the start of a run, across resumes. ``--resume PATH --max-iterations M``
continues a checkpoint at iteration N for M more iterations (to N+M). An elastic restart
(torchrun ``--max_restarts``; ``TORCHELASTIC_RESTART_COUNT`` > 0) resumes from this run's own
``checkpoints/latest.pt`` when one exists and trains only up to the iteration the job was asked to
reach, which the checkpoint records (``spec.target_iteration``). Isaac Lab restarts from scratch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab import rundir
from islab.worker.checkpoint import check_compatible, load_checkpoint_for_rank
from islab.worker.collectives import Collective


@dataclass
class ResumePoint:
    """Where training starts: a checkpoint (or none) and the iteration the job must reach."""

    checkpoint: dict[str, Any] | None
    source: str | None  # the checkpoint file, as rank 0 resolved it
    target_iteration: int
    reason: str  # "new", "resume" or "elastic restart <K>"


def same_job(checkpoint: dict[str, Any], job_id: str | None) -> bool:
    """Was ``checkpoint`` written by this torchrun job (not an earlier job resumed in place)?
    torchrun's run id tells, when it is set (c10d rendezvous, --standalone); "none" tells nothing."""
    theirs = checkpoint.get("spec", {}).get("job_id")
    return theirs in (None, "none") or job_id in (None, "none") or theirs == job_id


def find_resume_point(
    args: argparse.Namespace, collective: Collective, run_identity: dict[str, Any], environ: dict[str, str]
) -> ResumePoint:
    """Collective: every rank calls it; only rank 0 opens files."""
    restart = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restart > 0:
        latest = rundir.latest_checkpoint(args.run_dir)
        checkpoint, source = load_checkpoint_for_rank(collective, latest, missing_ok=True)
        if checkpoint is not None:
            check_compatible(checkpoint, run_identity, source)
        if checkpoint is not None and same_job(checkpoint, environ.get("TORCHELASTIC_RUN_ID")):
            target = int(checkpoint["spec"]["target_iteration"])
            return ResumePoint(checkpoint, source, target, f"elastic restart {restart}")
    if args.resume is not None:
        checkpoint, source = load_checkpoint_for_rank(collective, args.resume)
        assert checkpoint is not None  # missing_ok=False raised instead
        check_compatible(checkpoint, run_identity, source)
        return ResumePoint(checkpoint, source, int(checkpoint["iteration"]) + args.max_iterations, "resume")
    return ResumePoint(None, None, args.max_iterations, "new")


def last_reported_iteration(progress: Path) -> int | None:
    """The highest iteration in ``progress.jsonl`` (rank 0's run directory), to count lost work."""
    return max((record["iteration"] for record in rundir.read_progress(progress)), default=None)
