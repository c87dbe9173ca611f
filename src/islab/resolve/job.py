"""Which scheduler job a launch is part of, decided once: from the allocation that placed this node.

A launch inside a scheduler's job (a SLURM step, a pod of a Kubernetes training job) differs from a
plain one in three ways, all read from the same allocation that gave the node its place
(:mod:`islab.resolve.slurm`, :mod:`islab.k8s.allocation`):

* its run directory is named after the job (``slurm-<id>``, ``k8s-<job>``), not the clock, so a
  requeued job or a pod started again finds its own checkpoint;
* a start that continues the job (a SLURM requeue, ``SLURM_RESTART_COUNT`` > 0; any start of a pod
  of a Kubernetes job, which says nothing about restarts) resumes from that checkpoint;
* a Kubernetes pod meets the others at a DNS name published only once that pod runs, so the
  launch waits for the name before the rendezvous.

Resolution records the identity on the :class:`~islab.resolve.resolved.ResolvedSpec` (``job``); the
planner names the run directory from it and the CLI waits for DNS when it says so. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobIdentity:
    """A scheduler job, as the allocation of this node describes it."""

    scheduler: str  # "slurm" | "k8s": the allocation reader's name
    run_leaf: str  # the run directory's last part, the same on every node and every restart
    restart: str | None = None  # why this start continues the job's own checkpoint; None: a first start
    waits_for_dns: bool = False  # node 0's address is a name that exists only once its pod runs
