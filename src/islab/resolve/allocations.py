"""Scheduler allocations: every scheduler that can tell a node its place is one reader here.

A reader says when it is on (its ``--<name>/--no-<name>`` flag, or by itself from the
environment, e.g. under ``srun``) and reads the allocation from the environment mapping: an
object with ``.layer(chosen)`` (:class:`islab.resolve.slurm.Allocation`) whose layer gives
``nnodes``, ``node_rank`` and the rendezvous. :func:`active_allocations` consults every reader of
:data:`ALLOCATION_READERS` in order; a new scheduler (Kubernetes, SkyPilot) is one more entry with its own
:class:`~islab.resolve.layers.Source`, not a new branch anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from islab.k8s import allocation as k8s
from islab.resolve import slurm
from islab.resolve.layers import Source
from islab.resolve.sources import AllocationSource
from islab.sky import allocation as sky


@dataclass(frozen=True)
class AllocationReader:
    """How one scheduler's allocation becomes a source of settings."""

    name: str  # the option that switches it on/off (--slurm/--no-slurm), the key in the CLI's options
    source: Source
    automatic: Callable[[Mapping[str, str]], bool]  # on by itself in this environment (flag not given)
    # environment -> an allocation with .layer(chosen) and, for a job that exists, .identity (a JobIdentity)
    read: Callable[[Mapping[str, str]], Any]

    def active(self, flag: bool | None, environ: Mapping[str, str]) -> bool:
        return flag is True or (flag is None and self.automatic(environ))


ALLOCATION_READERS: tuple[AllocationReader, ...] = (
    AllocationReader("slurm", Source.SLURM, slurm.in_srun_step, slurm.allocation_from_environ),
    AllocationReader("k8s", Source.K8S, k8s.in_kubernetes_pod, k8s.allocation_from_environ),
    AllocationReader("sky", Source.SKY, sky.in_skypilot_run, sky.allocation_from_environ),
)

ALLOCATION_SOURCES = frozenset(reader.source for reader in ALLOCATION_READERS)


def active_allocations(
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    readers: Sequence[AllocationReader] = ALLOCATION_READERS,
) -> tuple[AllocationSource, ...]:
    """The allocations this process runs in, read from ``environ`` (the edge passes os.environ);
    ``flags``: each reader's ``--<name>/--no-<name>`` (None: not given)."""
    found = []
    for reader in readers:
        if reader.active(flags.get(reader.name), environ):
            allocation = reader.read(environ)
            # the job it is: decided here, once, for the planner and the ranks (islab.resolve.job)
            found.append(AllocationSource(reader.source, allocation.layer, getattr(allocation, "identity", None)))
    return tuple(found)
