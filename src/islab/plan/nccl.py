"""NCCL settings a plan adds to its ranks' environment (pure): the flight recorder and ``--nccl-safe``.

**The flight recorder.** PyTorch's ProcessGroupNCCL keeps a ring buffer of the last collectives
each rank issued (``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries; torch 2.13 also reads
``TORCH_FR_BUFFER_SIZE``) and, with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``, writes it when its watchdog
sees a collective time out, to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + the rank (names checked in
torch 2.13's ``ProcessGroupNCCL.hpp`` and ``FlightRecorder.hpp``; the default prefix is
``/tmp/nccl_trace_rank_``). islab's worker gets all three, pointing into the run directory, so a
hang leaves a per-rank trace next to the stacks ``--hang-timeout`` dumps. A user's entry point is
not ours to change (it may set them itself).

**--nccl-safe.** The conservative transports users are told to try first
(:data:`islab.preflight.triage.NCCL_SAFE_ENV`), for every rank.

In both cases a value the user set -- in the cluster file's ``env`` or the shell that starts
islab-train -- wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from islab.plan.launch_plan import LaunchPlan
from islab.preflight.triage import NCCL_SAFE_ENV
from islab.rundir import flight_recorder_prefix
from islab.spec.run_spec import RunSpec

FLIGHT_RECORDER_ENTRIES = 2000  # collectives remembered per rank (torch's own default when enabled)


def flight_recorder_env(run_dir: str) -> dict[str, str]:
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(flight_recorder_prefix(run_dir)),
    }


def with_env(plan: LaunchPlan, added: Mapping[str, str], inherited: Mapping[str, str]) -> LaunchPlan:
    """``plan`` with ``added`` in every node's and rank's environment, except the names the plan's
    env (the user's cluster-file ``env``) or ``inherited`` (the shell's environment) already set."""

    def merged(env: Mapping[str, str]) -> Mapping[str, str]:
        fresh = {name: value for name, value in added.items() if name not in env and name not in inherited}
        return MappingProxyType({**env, **fresh})

    nodes = tuple(
        replace(node, env=merged(node.env), ranks=tuple(replace(rank, env=merged(rank.env)) for rank in node.ranks))
        for node in plan.nodes
    )
    return replace(plan, nodes=nodes)


def with_nccl_settings(plan: LaunchPlan, spec: RunSpec, *, safe: bool, inherited: Mapping[str, str]) -> LaunchPlan:
    """The flight recorder for islab's worker on GPUs, and :data:`NCCL_SAFE_ENV` with ``--nccl-safe``
    (``safe``), in every rank's environment; the user's own values win."""
    added: dict[str, str] = {}
    if spec.entrypoint is None and spec.device == "cuda":
        added.update(flight_recorder_env(plan.run_dir))
    if safe:
        added.update(NCCL_SAFE_ENV)
    return with_env(plan, added, inherited) if added else plan
