"""Where a rank starts: fresh, from ``--resume``, after an elastic restart or a SLURM requeue.

Iterations count from the start of a run, across resumes. One rule for every way a run continues:
it finishes the run's original target (recorded in the checkpoint, ``spec.target_iteration``) unless
a length is given with it -- ``--resume PATH`` alone trains to that target; ``--resume PATH
--max-iterations M`` continues a checkpoint at iteration N for M more iterations (to N+M). A restart of the same job --
an elastic restart (torchrun ``--max_restarts``; torchrun tells each rank ``TORCHELASTIC_RESTART_COUNT`` > 0)
or a start the launcher says continues its scheduler job (``--job-restart``: a requeued SLURM job, a pod
of a Kubernetes job started again, a recovered SkyPilot managed job; decided once from the allocation,
:mod:`islab.resolve.job`, with the job in ``--scheduler-job`` and the run directory named after it) --
resumes from this run's own
``checkpoints/latest.pt`` when that job wrote one, and trains only up to the iteration the job was
asked to reach, which the checkpoint records (``spec.target_iteration``). Isaac Lab restarts from scratch.
A rank reads no scheduler's variables itself.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab import rundir
from islab.worker.checkpoint import check_compatible, load_checkpoint_for_rank
from islab.worker.collectives import Collective

NEW = "new"  # a fresh start
RESUME = "resume"  # --resume PATH


@dataclass
class ResumePoint:
    """Where training starts: a checkpoint (or none) and the iteration the job must reach."""

    checkpoint: dict[str, Any] | None
    source: str | None  # the checkpoint file, as rank 0 resolved it
    target_iteration: int
    reason: str  # NEW, RESUME, "elastic restart <K>" or the launcher's --job-restart ("SLURM requeue <K>", ...)

    @property
    def is_restart(self) -> bool:
        """A restart of the same job (torchrun's or the scheduler's), continuing the job's own checkpoint."""
        return self.reason not in (NEW, RESUME)


def restart_of(args: argparse.Namespace, environ: dict[str, str]) -> str | None:
    """Why this is a restart of a job that already ran (so its own checkpoint continues it), or None:
    torchrun's elastic restart (its variable, set per rank), else what the launcher decided
    (``--job-restart``)."""
    elastic = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if elastic > 0:
        return f"elastic restart {elastic}"
    return args.job_restart


def scheduler_job_of(spec: dict[str, Any]) -> str | None:
    """The scheduler job a checkpoint's run was part of (``slurm-<id>``, ``k8s-<name>``); older
    checkpoints recorded only a SLURM job id."""
    if spec.get("scheduler_job"):
        return str(spec["scheduler_job"])
    return f"slurm-{spec['slurm_job_id']}" if spec.get("slurm_job_id") else None


def same_job(checkpoint: dict[str, Any], args: argparse.Namespace, environ: dict[str, str]) -> bool:
    """Was ``checkpoint`` written by this job (not an earlier job resumed in place)? A restart of a
    scheduler job (``--job-restart``) takes only a checkpoint of that job (``--scheduler-job``);
    torchrun's run id tells too, when it is set (c10d rendezvous, --standalone), "none" telling nothing."""
    spec = checkpoint.get("spec", {})
    ours_job = args.scheduler_job
    if args.job_restart and ours_job and scheduler_job_of(spec) != ours_job:
        return False
    theirs, ours = spec.get("job_id"), environ.get("TORCHELASTIC_RUN_ID")
    return theirs in (None, "none") or ours in (None, "none") or theirs == ours


def find_resume_point(
    args: argparse.Namespace, collective: Collective, run_identity: dict[str, Any], environ: dict[str, str]
) -> ResumePoint:
    """Collective: every rank calls it; only rank 0 opens files."""
    restart = restart_of(args, environ)
    if restart is not None:
        latest = rundir.latest_checkpoint(args.run_dir)
        checkpoint, source = load_checkpoint_for_rank(collective, latest, missing_ok=True)
        if checkpoint is not None:
            check_compatible(checkpoint, run_identity, source)
        if checkpoint is not None and same_job(checkpoint, args, environ):
            target = int(checkpoint["spec"]["target_iteration"])
            return ResumePoint(checkpoint, source, target, restart)
    if args.resume is not None:
        checkpoint, source = load_checkpoint_for_rank(collective, args.resume)
        assert checkpoint is not None  # missing_ok=False raised instead
        check_compatible(checkpoint, run_identity, source)
        if args.max_iterations is not None:  # given with --resume: that many more
            return ResumePoint(checkpoint, source, int(checkpoint["iteration"]) + args.max_iterations, RESUME)
        original = checkpoint.get("spec", {}).get("target_iteration", checkpoint["iteration"])
        return ResumePoint(checkpoint, source, int(original), RESUME)
    return ResumePoint(None, None, args.max_iterations, NEW)


def last_reported_iteration(progress: Path) -> int | None:
    """The highest iteration in ``progress.jsonl`` (rank 0's run directory), to count lost work."""
    return max((record["iteration"] for record in rundir.read_progress(progress)), default=None)
