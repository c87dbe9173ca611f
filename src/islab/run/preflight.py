"""Run this node's part of the pre-flight probe plan, with a hard time limit, and say how it went.

The probe plan (:func:`islab.plan.preflight.probe_plan`) goes through the same node runner
(:data:`islab.run.supervise.NODE_RUNNERS`: torchrun, or skrl-JAX's ranks started directly) and the
same poll loop (:func:`islab.run.processes.watch`) as the training, so it starts, stops and cleans
up exactly like it. What differs:

* nothing of the probe reaches the console; every rank's output (NCCL_DEBUG=INFO included) goes to
  ``<run_dir>/preflight/rank_<R>.log``;
* a wall-clock limit: every probe process is gone by the pre-flight timeout +
  :data:`~islab.plan.preflight.KILL_AFTER_S` (SIGTERM a little before, then SIGKILL);
* the outcome is one line when healthy (:func:`islab.preflight.report.summary_line`), else one
  message (:func:`islab.preflight.verdict.verdict`), and ``preflight.json`` with ``ok: false``.
"""

from __future__ import annotations

import io
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from islab.doctor.probes import connect_state
from islab.plan.launch_plan import LaunchPlan
from islab.plan.preflight import KILL_AFTER_S
from islab.plan.torchrun import nproc_of
from islab.preflight.report import summary_line, write_report
from islab.preflight.verdict import Evidence, verdict
from islab.run.console import ConsolePolicy, RunView
from islab.run.entrypoint import RankLogWriter
from islab.run.failures import last_exception_line
from islab.run.processes import watch
from islab.run.supervise import NODE_RUNNERS
from islab.rundir import preflight_path, preflight_rank_log, read_lines, read_preflight
from islab.spec.addresses import split_host_port

REACH_TIMEOUT_S = 1.5  # a TCP connect to node 0's rendezvous, after this node's ranks never started
STOP_GRACE_S = 2.0  # SIGTERM -> SIGKILL for probe processes: they hold no state worth a longer wait


class _Silent(ConsolePolicy):
    """The probe's output goes to its logs only."""

    def shows(self, rank: int | None, stream: str, text: str = "") -> bool:
        return False


@dataclass(frozen=True)
class PreflightOutcome:
    status: int  # 0 healthy, 1 failed, 128 + N stopped by signal N
    report: dict[str, Any] | None
    message: str  # the summary line when ok, else the whole failure message
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == 0


def _report_since(run_dir: str, started: float) -> dict[str, Any] | None:
    path = preflight_path(run_dir)
    try:
        if path.stat().st_mtime < started - 1:
            return None  # an earlier launch's (a run resumed in place)
    except OSError:
        return None
    return read_preflight(run_dir)


def run_preflight(plan: LaunchPlan, node_rank: int, timeout_s: int) -> PreflightOutcome:
    """Run ``node_rank``'s part of the probe ``plan`` (see the module docstring)."""
    node = plan.node(node_rank)
    runner = NODE_RUNNERS[plan.launcher](plan, node)
    nproc = len(node.ranks) if node.ranks else nproc_of(node.argv)
    first_rank = node_rank * nproc
    logs = RankLogWriter(plan.run_dir, getattr(runner, "first_rank", None), log_of=preflight_rank_log)
    for rank in range(first_rank, first_rank + nproc):  # a stale log of an earlier launch would count as an answer
        preflight_rank_log(plan.run_dir, rank).unlink(missing_ok=True)

    def on_line(rank: int | None, line: str) -> None:
        logs(rank, line)
        runner.observe(rank, line)

    started_wall, started = time.time(), time.monotonic()
    # Stopping starts early enough that SIGTERM, the grace, SIGKILL and (on another node than 0) one
    # connect to the rendezvous are over by timeout + KILL_AFTER_S.
    limit = started + timeout_s + KILL_AFTER_S - STOP_GRACE_S - REACH_TIMEOUT_S - 1
    sink = io.StringIO()
    try:
        outcome = watch(
            runner.children(), grace_s=STOP_GRACE_S, out=sink, err=sink,
            view=RunView(plan.run_dir, sink, live=False, progress=False), policy=_Silent(), fail_fast=True,
            on_line=on_line, overdue=lambda: runner.overdue() or time.monotonic() > limit,
        )  # fmt: skip
    finally:
        logs.close()
        runner.close()
    seconds = time.monotonic() - started
    report = _report_since(plan.run_dir, started_wall)
    if outcome.received is not None:
        name = signal.Signals(outcome.received).name
        return PreflightOutcome(128 + outcome.received, report, f"islab-train: stopped by {name} during the pre-flight",
                                seconds)  # fmt: skip
    if all(status == 0 for status in outcome.statuses) and (report is None or report.get("ok")):
        # The line's seconds are what the launch waited (processes started and stopped), not the probe's own.
        line = (
            summary_line({**report, "seconds": seconds})
            if report
            else f"pre-flight: node {node_rank} passed ({seconds:.1f} s)"
        )
        return PreflightOutcome(0, report, line, seconds)
    mine = range(first_rank, first_rank + nproc)
    rank_logs = {rank: read_lines(preflight_rank_log(plan.run_dir, rank)) for rank in mine}
    exceptions = {rank: text for rank, lines in rank_logs.items() if (text := last_exception_line(lines))}
    launcher_lines = [line for tail in outcome.tails for line in tail]
    reach = None
    if node_rank != 0 and plan.rendezvous_address and not any(rank_logs.values()):
        # this node's ranks never started: can it reach node 0's rendezvous at all? (1.5 s at most)
        reach = connect_state(*split_host_port(plan.rendezvous_address), timeout_s=REACH_TIMEOUT_S)
    evidence = Evidence(
        node_rank=node_rank, nnodes=plan.nnodes, nproc_per_node=nproc, rank_logs=rank_logs,
        launcher_lines=launcher_lines, exceptions=exceptions, killed_at_limit=outcome.overdue, seconds=seconds,
        timeout_s=timeout_s, rendezvous=plan.rendezvous_address, report=report, rendezvous_reach=reach,
    )  # fmt: skip
    problems, lines = verdict(evidence)
    failed = {
        **(report or {"world_size": plan.nnodes * nproc, "nodes": plan.nnodes, "ranks": [], "all_reduce": []}),
        "ok": False, "seconds": round(seconds, 2), "problems": problems,
    }  # fmt: skip
    if report is None or report.get("ok"):
        write_report(plan.run_dir, failed)
    where = os.path.abspath(preflight_rank_log(plan.run_dir, "<R>"))
    message = "\n".join([
        f"error: pre-flight failed on node {node_rank} after {seconds:.1f} s (--preflight-timeout {timeout_s}); "
        "nothing was trained:",
        *lines,
        f"  probe logs: {where}; preflight.json in the run directory; --preflight off skips this check.",
    ])  # fmt: skip
    return PreflightOutcome(1, failed, message, seconds)
