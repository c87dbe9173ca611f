"""What a real launch checks before any rank starts, after the plan is made.

Three checks, cheapest first, each refusing with a message that names the fix:

* :func:`run_dir_taken` -- the run directory already holds another run (its checkpoints would be
  overwritten);
* :func:`doctor_checks` -- the doctor's cheap checks of this node (addresses, ports, interfaces,
  versions): errors stop the launch with exit 2, warnings print;
* :func:`run_collective_check` -- the pre-flight: the job's own plan with a short probe as every
  rank's program (:mod:`islab.plan.preflight`, :mod:`islab.run.preflight`), which joins the process
  group, checks identities and times collectives, so a broken network or GPU placement is named in
  seconds instead of after the training's rendezvous timeout.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any

import typer

from islab.cli.options import PROG
from islab.doctor import checks as doctor
from islab.doctor import facts as doctor_facts
from islab.doctor import report as doctor_report
from islab.plan.launch_plan import LaunchPlan
from islab.plan.preflight import DEFAULT_PREFLIGHT_TIMEOUT_S, probe_plan
from islab.run.preflight import PreflightOutcome, run_preflight
from islab.rundir import continued_run_dir, latest_checkpoint, read_heartbeats, summary_path
from islab.spec.issues import Issue, SpecError
from islab.spec.run_spec import RunSpec


@dataclass(frozen=True)
class PreflightOptions:
    """--preflight, --preflight-timeout, --nccl-safe."""

    mode: str = "on"
    timeout_s: int = DEFAULT_PREFLIGHT_TIMEOUT_S
    nccl_safe: bool = False


def preflight_options(options: dict[str, Any]) -> PreflightOptions:
    """The pre-flight options of a command; SpecError for a timeout that is not positive."""
    mode = options.get("preflight")
    timeout = options.get("preflight_timeout")
    if timeout is not None and timeout <= 0:
        raise SpecError(Issue("--preflight-timeout", f"must be a positive number of seconds, got {timeout}",
                              "Give e.g. --preflight-timeout 60, or --preflight off to skip the check"))  # fmt: skip
    return PreflightOptions(
        mode=mode.value if isinstance(mode, Enum) else (mode or "on"),
        timeout_s=timeout or DEFAULT_PREFLIGHT_TIMEOUT_S,
        nccl_safe=bool(options.get("nccl_safe")),
    )


def run_collective_check(spec: RunSpec, plan: LaunchPlan, node_rank: int, timeout_s: int) -> PreflightOutcome:
    """This node's part of the pre-flight probe; its line or message goes to stderr."""
    outcome = run_preflight(probe_plan(plan, spec, timeout_s), node_rank, timeout_s)
    print(outcome.message, file=sys.stderr, flush=True)
    return outcome


def run_dir_taken(spec: RunSpec, plan: LaunchPlan, job_leaf: str | None, *, now: float) -> Issue | None:
    """A run directory that already holds another run is not trained into again (identical
    multi-node launches name the same ``spec-<digest>`` directory, and the new run would overwrite
    the first one's checkpoints). Allowed: ``--resume`` of that directory; a scheduler job's own
    directory (``slurm-<job id>``, ``k8s-<name>``: a requeue or a restarted pod resumes there by
    itself); a job that is still running there (a heartbeat younger than the hang or rendezvous
    timeout and than the run's summary: a node joining an elastic job); a directory with no
    checkpoint and no summary yet (the nodes of one job start together).
    torchrun's own restarts happen inside this launch and never come here."""
    run_dir = plan.run_dir
    if run_dir == continued_run_dir(spec.resume) or job_leaf is not None:
        return None
    if not (latest_checkpoint(run_dir).is_file() or summary_path(run_dir).is_file()):
        return None
    window = max(plan.hang_timeout_s, plan.rendezvous_timeout_s)
    summary = summary_path(run_dir)
    ended = summary.stat().st_mtime if summary.is_file() else 0.0  # rank 0 writes it last
    beats = [float(beat.get("time", 0)) for beat in read_heartbeats(run_dir).values()]
    if any(ended < beat and now - beat < window for beat in beats):
        return None
    return Issue(
        "run directory",
        f"{run_dir} already holds another run, whose checkpoints this launch would overwrite (identical "
        "multi-node launches name the same directory)",
        f"Pass --run-name NAME for a directory of its own, or --resume {run_dir} to continue that run",
    )


def doctor_checks(spec: RunSpec, plan: LaunchPlan, visible_gpus: int) -> bool:
    """The cheap doctor checks before a real launch: errors stop it (exit 2), warnings print.
    Returns whether this node owns the c10d endpoint's address (it must host the store)."""
    facts = doctor_facts.gather_facts(spec, plan, full=False, visible_gpus=visible_gpus)
    errors, warnings = doctor_report.launch_messages(doctor.run_checks(facts, before_launch=True))
    for line in warnings + errors:
        print(line, file=sys.stderr)
    if errors:
        print(f"islab-train: nothing was started; '{PROG} doctor' with the same options checks more.", file=sys.stderr)
        raise typer.Exit(2)
    rdzv = facts.rendezvous
    return bool(rdzv and rdzv.kind == "c10d endpoint" and rdzv.listens)
