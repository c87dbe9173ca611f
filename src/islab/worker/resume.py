"""Where a rank starts: fresh, from ``--resume``, after an elastic restart or a SLURM requeue.

Iterations count from the start of a run, across resumes. One rule for every way a run continues:
it finishes the run's original target (recorded in the checkpoint, ``spec.target_iteration``) unless
a length is given with it -- ``--resume PATH`` alone trains to that target; ``--resume PATH
--max-iterations M`` continues a checkpoint at iteration N for M more iterations (to N+M). A restart of the same job --
an elastic restart (torchrun ``--max_restarts``; ``TORCHELASTIC_RESTART_COUNT`` > 0) or a requeued
SLURM job (same ``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT`` > 0, whose run directory is named after
the job id), or a pod of a Kubernetes job started again (``ISLAB_K8S_JOB``, run directory
``k8s-<job>`` on the job's volume), or a recovered SkyPilot managed job (``SKYPILOT_TASK_ID``, the run
directory named after it on the job's bucket or volume) -- resumes from this run's own ``checkpoints/latest.pt`` when
that job wrote one, and trains only up to the iteration the job was asked to reach, which the
checkpoint records (``spec.target_iteration``). Isaac Lab restarts from scratch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab import rundir
from islab.k8s.names import JOB_VARIABLE as K8S_JOB_VARIABLE
from islab.sky.names import TASK_ID_VARIABLE as SKY_TASK_VARIABLE
from islab.sky.names import is_managed
from islab.worker.checkpoint import check_compatible, load_checkpoint_for_rank
from islab.worker.collectives import Collective


@dataclass
class ResumePoint:
    """Where training starts: a checkpoint (or none) and the iteration the job must reach."""

    checkpoint: dict[str, Any] | None
    source: str | None  # the checkpoint file, as rank 0 resolved it
    target_iteration: int
    reason: str  # "new", "resume", "elastic restart <K>" or "SLURM requeue <K>"


def restart_of(environ: dict[str, str]) -> str | None:
    """Why this is a restart of a job that already ran (so its own checkpoint continues it), or None."""
    elastic = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if elastic > 0:
        return f"elastic restart {elastic}"
    requeue = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if requeue > 0 and environ.get("SLURM_JOB_ID"):
        return f"SLURM requeue {requeue}"
    # Kubernetes says nothing about restarts; every pod start of a job that `islab-train k8s` wrote
    # continues the job's own checkpoint in its run directory k8s-<job> when there is one.
    k8s_job = environ.get(K8S_JOB_VARIABLE)
    if k8s_job:
        return f"Kubernetes job {k8s_job} started again"
    # A managed SkyPilot job keeps its task id through every recovery, and the task id names the run
    # directory on the job's storage: a recovery continues the job's own checkpoint there.
    sky_task = environ.get(SKY_TASK_VARIABLE)
    if is_managed(sky_task):
        return f"SkyPilot managed job {sky_task} recovered"
    return None


def same_job(checkpoint: dict[str, Any], environ: dict[str, str]) -> bool:
    """Was ``checkpoint`` written by this job (not an earlier job resumed in place)? Under SLURM the
    job id must match; torchrun's run id tells too, when it is set (c10d rendezvous, --standalone),
    "none" telling nothing."""
    spec = checkpoint.get("spec", {})
    slurm_job = environ.get("SLURM_JOB_ID")
    if slurm_job and int(environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0 and spec.get("slurm_job_id") != slurm_job:
        return False
    theirs, ours = spec.get("job_id"), environ.get("TORCHELASTIC_RUN_ID")
    return theirs in (None, "none") or ours in (None, "none") or theirs == ours


def find_resume_point(
    args: argparse.Namespace, collective: Collective, run_identity: dict[str, Any], environ: dict[str, str]
) -> ResumePoint:
    """Collective: every rank calls it; only rank 0 opens files."""
    restart = restart_of(environ)
    if restart is not None:
        latest = rundir.latest_checkpoint(args.run_dir)
        checkpoint, source = load_checkpoint_for_rank(collective, latest, missing_ok=True)
        if checkpoint is not None:
            check_compatible(checkpoint, run_identity, source)
        if checkpoint is not None and same_job(checkpoint, environ):
            target = int(checkpoint["spec"]["target_iteration"])
            return ResumePoint(checkpoint, source, target, restart)
    if args.resume is not None:
        checkpoint, source = load_checkpoint_for_rank(collective, args.resume)
        assert checkpoint is not None  # missing_ok=False raised instead
        check_compatible(checkpoint, run_identity, source)
        if args.max_iterations is not None:  # given with --resume: that many more
            return ResumePoint(checkpoint, source, int(checkpoint["iteration"]) + args.max_iterations, "resume")
        original = checkpoint.get("spec", {}).get("target_iteration", checkpoint["iteration"])
        return ResumePoint(checkpoint, source, int(original), "resume")
    return ResumePoint(None, None, args.max_iterations, "new")


def last_reported_iteration(progress: Path) -> int | None:
    """The highest iteration in ``progress.jsonl`` (rank 0's run directory), to count lost work."""
    return max((record["iteration"] for record in rundir.read_progress(progress)), default=None)
