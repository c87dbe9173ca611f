"""What a real launch checks before any rank starts, after the plan is made.

First, :func:`nothing_to_train`: ``--resume`` of a run that already reached its target starts
nothing. Then three checks, cheapest first, each refusing with a message that names the fix:

* :func:`run_dir_taken` -- the run directory already holds another run (its checkpoints would be
  overwritten); a new run of one node claims a directory of its own instead (:func:`claim_run_dir`);
* :func:`doctor_checks` -- the doctor's cheap checks of this node (addresses, ports, interfaces,
  versions): errors stop the launch with exit 2, warnings print;
* :func:`run_collective_check` -- the pre-flight: the job's own plan with a short probe as every
  rank's program (:mod:`islab.plan.preflight`, :mod:`islab.run.preflight`), which joins the process
  group, checks identities and times collectives, so a broken network or GPU placement is named in
  seconds instead of after the training's rendezvous timeout.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from islab.cli.options import PROG
from islab.doctor import checks as doctor
from islab.doctor import facts as doctor_facts
from islab.doctor import report as doctor_report
from islab.plan.launch_plan import LaunchPlan
from islab.plan.preflight import DEFAULT_PREFLIGHT_TIMEOUT_S, probe_plan
from islab.preflight.prediction import predict, prediction_line
from islab.preflight.report import PREDICTION_KEY, write_report
from islab.run.preflight import PreflightOutcome, run_preflight
from islab.rundir import (
    PREFLIGHT_DIR,
    claim_new_dir,
    continued_run_dir,
    latest_checkpoint,
    reached_target,
    read_heartbeats,
    summary_path,
)
from islab.spec.agent_config import load_agent_config
from islab.spec.issues import Issue, SpecError
from islab.spec.run_spec import RunSpec
from islab.spec.sync_cost import SyncWork, sync_mode, sync_work
from islab.tasks import TASKS


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
    """This node's part of the pre-flight probe; its line or message goes to stderr. On node 0 of a
    healthy job of islab's worker, a second line predicts the sync cost per iteration (also in
    ``preflight.json`` under ``prediction``)."""
    outcome = run_preflight(probe_plan(plan, spec, timeout_s), node_rank, timeout_s)
    print(outcome.message, file=sys.stderr, flush=True)
    work = sync_work_of(spec, os.environ) if outcome.ok and outcome.report and node_rank == 0 else None
    predicted = predict(work, outcome.report) if work is not None and outcome.report else None
    if predicted is not None:
        report = {**(outcome.report or {}), PREDICTION_KEY: predicted}
        write_report(plan.run_dir, report)
        print(prediction_line(predicted), file=sys.stderr, flush=True)
        outcome = replace(outcome, report=report)
    return outcome


def preflight_before_training(
    spec: RunSpec, plan: LaunchPlan, node_rank: int, checks: PreflightOptions, *, claimed: bool
) -> int | None:
    """This node's pre-flight before training: None to go on and train, else the exit status -- it
    failed, ``--preflight only``, or it was stopped (Ctrl-C), and then the new run directory this
    launch ``claimed`` is removed (:func:`discard_untrained`)."""
    try:
        outcome = run_collective_check(spec, plan, node_rank, checks.timeout_s)
    except KeyboardInterrupt:  # before the probe's processes (and the loop that forwards signals) were up
        print(f"{PROG}: stopped by SIGINT during the pre-flight", file=sys.stderr)
        outcome = PreflightOutcome(128 + signal.SIGINT, None, "", 0.0)
    if outcome.status > 128:  # stopped by a signal
        print(discard_untrained(plan.run_dir, claimed=claimed), file=sys.stderr)
    return None if outcome.ok and checks.mode != "only" else outcome.status


def sync_work_of(spec: RunSpec, environ: Mapping[str, str]) -> SyncWork | None:
    """What islab's worker will synchronise per iteration (updates, gradient sizes), from the agent
    config and the task's sizes; None for a user's entry point (--script, --isaaclab, --mjlab: their
    update loop is not ours to read), ``ISLAB_SYNC=stock`` (its counts are measured, not derived) or
    a config or task this model cannot read."""
    if spec.entrypoint is not None:
        return None
    try:
        if sync_mode({**environ, **spec.env}) != "fused":
            return None
        info = TASKS[spec.task]
        if info.observation_size is None or info.action_size is None:
            return None
        agent_cfg = load_agent_config(spec.lib, spec.task, spec.overrides)
        return sync_work(spec.lib, spec.ml_framework, agent_cfg, observation_size=info.observation_size,
                         action_size=info.action_size, num_envs=spec.num_envs)  # fmt: skip
    except (ValueError, KeyError, OSError):
        return None


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


def nothing_to_train(spec: RunSpec, plan: LaunchPlan) -> str | None:
    """``--resume RUN_DIR`` alone, of a run whose last launch already trained to its target
    (:func:`islab.rundir.reached_target`): the line that says so and how to train further, and the
    launch stops there, exit 0 -- starting the ranks would only rewrite the run's records (its
    ``summary.json`` with 0 iterations) to train nothing."""
    run_dir = continued_run_dir(spec.resume)
    reached = reached_target(run_dir) if plan.to_target and run_dir is not None else None
    if reached is None:
        return None
    where = os.path.abspath(str(run_dir))
    further = shlex.join([PROG, "--resume", where, "--max-iterations", "M"])
    return (
        f"{PROG}: {where} already reached its target (iteration {reached[0]} of {reached[1]}); nothing was "
        f"started and the run is as it was. To train it further: {further} (M more iterations)"
    )


def claim_run_dir(spec: RunSpec, plan: LaunchPlan, job_leaf: str | None) -> str | None:
    """The directory a new run of one node trains in, created by this launch alone
    (:func:`islab.rundir.claim_new_dir`): the planned one, or ``<planned>-2`` ... when another launch
    made it first (two identical launches in the same second). None where the directory is joined,
    not claimed -- ``--resume`` of a run directory, a scheduler's job (``slurm-<id>``, ``k8s-<name>``),
    several nodes (each plans the same name from what they share; :func:`run_dir_taken` guards it)."""
    if plan.run_dir == continued_run_dir(spec.resume) or job_leaf is not None or spec.nnodes > 1:
        return None
    return str(claim_new_dir(plan.run_dir))


def discard_untrained(run_dir: str, *, claimed: bool) -> str:
    """A launch stopped before its ranks started (Ctrl-C during the pre-flight) leaves no half run
    directory behind for a later ``--resume`` or a listing to trip over: the directory it claimed
    holds only its ``launch.yaml`` and the probe's logs, and is removed. A directory it joined
    (``--resume``, a multi-node or scheduler job's) is another run's, or another node's: only an
    empty ``preflight/`` folder goes. Returns the line that says what happened."""
    where = os.path.abspath(run_dir)
    if claimed:
        shutil.rmtree(run_dir, ignore_errors=True)
        return f"{PROG}: nothing was trained; removed the new run directory {where}"
    with contextlib.suppress(OSError):
        Path(run_dir, PREFLIGHT_DIR).rmdir()  # only when empty
    return f"{PROG}: nothing was trained; {where} keeps what earlier launches left in it"


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
