"""Run one node's launch plan and stand guard over it.

:func:`run_plan` picks the node runner for the plan's launcher -- :class:`~islab.plan.torchrun_node.TorchrunNode`
(torchrun starts the ranks) or :class:`~islab.plan.skrl_jax_node.SkrlJaxNode` (islab-train starts
the skrl-JAX ranks itself, since skrl's launcher hides failures) -- and runs its children through
the one poll loop of :mod:`islab.run.processes`:

* **Exit codes tell the truth.** The launcher's exit code is passed through (death by signal N
  becomes 128 + N); islab-train stopped by SIGINT exits 130. A preempting signal (SIGTERM,
  SIGUSR1) whose stop the ranks checkpointed exits 75 (:data:`islab.spec.stopping.PREEMPTED_EXIT_CODE`),
  one that could not be checkpointed in time 128 + signal (143, 138). Isaac Lab's trainer stops on
  SIGINT instead and goes on from its own newest checkpoint (:mod:`islab.run.isaaclab_launch`).
* **Failures are named.** One ``error:`` line with the node, the rank, its exception (torch's
  error files, see :mod:`islab.plan.torchrun`) or the signal that killed it, and its log.
* **Diverged ranks fail the run.** After a successful run the ranks' final policy digests
  (``digests/rank_<R>.json`` in the run directory) must all be equal; otherwise exit 1 and one
  ``error:`` line naming which ranks hold which policy.
* **Rendezvous failures are named too.** Nodes that do not all arrive within
  ``rendezvous.timeout_s`` end the run with one message naming the timeout and the address.
* **Hangs are named.** With our worker, ranks that finish no iteration for ``hang_timeout_s``
  dump their stacks to their logs, the job is stopped and one message names the ranks that are
  behind and where they are stuck (:mod:`islab.run.hangs`); islab-train exits 1. An entry point's
  progress is its TensorBoard events, its ranks' stacks come from faulthandler switched on through
  their environment, or py-spy (:mod:`islab.run.event_hangs`).
* **The console is ours.** By default only rank 0's stderr passes (``--all-ranks``: everything,
  prefixed ``[rank R]``), the ranks' full output being in their log files. On the node that hosts
  rank 0 a :class:`~islab.run.console.RunView` draws the progress and, after a successful
  run, the summary table and ``curves.png``.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from islab.plan.launch_plan import LaunchPlan
from islab.run.console import ConsolePolicy, RunView, finish, resume_command
from islab.run.entrypoint import RankLogWriter, events_reader
from islab.run.event_hangs import EventHangWatch, with_fault_handler
from islab.run.event_owners import JobEventFiles
from islab.run.failures import known_failure_lines
from islab.run.gpu_watch import FirstOf, GpuWatch, load_nvml
from islab.run.hangs import HangWatch
from islab.run.isaaclab_launch import preemption_line, record_run_folder, resume_hint
from islab.run.processes import watch
from islab.run.skrl_jax_node import SkrlJaxNode
from islab.run.torchrun_node import TorchrunNode
from islab.rundir import DIGESTS_DIR, digest_divergence, latest_checkpoint, read_digests, read_summary, summary_path
from islab.spec.stopping import PREEMPT_GRACE_S, PREEMPT_SIGNALS, PREEMPTED_EXIT_CODE

# SIGKILL what is left this long after a forwarded SIGINT/SIGTERM, so that nothing of the job
# is alive 10 s after the signal even when a process ignores SIGTERM.
DEFAULT_GRACE_S = 5.0
# The plan names its launcher once (islab.plan.plan, from the library registry).
NODE_RUNNERS = {"torchrun": TorchrunNode, "skrl-jax": SkrlJaxNode}


@dataclass(frozen=True)
class ConsoleOptions:
    """How a run looks on the console (see :mod:`islab.run.console`).

    The defaults (everything shown, no progress display) suit tests and embedding; the command
    line asks for ``all_ranks=False`` and a progress display on the node that hosts rank 0."""

    all_ranks: bool = True
    progress: bool = False  # read progress.jsonl: live display or plain lines, summary at the end
    live: bool = False  # Rich live display (a terminal) instead of plain lines
    interval_s: float = 10.0  # plain lines: at most one per interval
    note: str = ""  # shown in the live display's title


def run_plan(
    plan: LaunchPlan,
    node_rank: int,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    preempt_grace_s: float = PREEMPT_GRACE_S,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    console: ConsoleOptions | None = None,
) -> int:
    """Run ``node_rank``'s part of ``plan`` to the end; return the exit status for islab-train."""
    if plan.entrypoint and plan.hang_timeout_s:  # a hung entry point's ranks dump their stacks on SIGABRT
        plan = with_fault_handler(plan, os.environ)
    node = plan.node(node_rank)
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    options = console or ConsoleOptions()
    runner = NODE_RUNNERS[plan.launcher](plan, node)
    on_line, logs, reader, owners = runner.observe, None, None, None
    if plan.entrypoint:  # a user's script: we write its rank logs and read its TensorBoard events
        logs = RankLogWriter(plan.run_dir, getattr(runner, "first_rank", None))
        root = plan.events_root or plan.run_dir
        # A preset's trainer writes under <cwd>/logs/<lib>, shared with any other run started there
        owners = JobEventFiles(root) if root != plan.run_dir else None
        reader = events_reader(root, plan.events_library, plan.events_not_before, owners and owners.owns)

        def on_line(rank: int | None, line: str) -> None:
            logs(rank, line)
            runner.observe(rank, line)

    nvml = load_nvml()  # ranks on one GPU stopped, each rank's GPU use shown (islab.run.gpu_watch)
    gpus = GpuWatch(nvml, entrypoint=bool(plan.entrypoint)) if nvml is not None else None
    view = RunView(
        plan.run_dir, out, live=options.live, progress=options.progress, note=options.note,
        interval_s=options.interval_s, reader=reader, last_line=logs and (lambda: logs.rank0_last),
        gpu_line=gpus and gpus.live_text,
    )  # fmt: skip
    explanation = io.StringIO()
    # Our worker's ranks write heartbeats; an entry point's progress is its TensorBoard events.
    hangs: Any = None
    if plan.hang_timeout_s and not plan.entrypoint:
        hangs = HangWatch(plan.run_dir, plan.hang_timeout_s)
    elif plan.hang_timeout_s:
        own = events_reader(root, plan.events_library, plan.events_not_before, owners and owners.owns)
        hangs = EventHangWatch(plan.run_dir, plan.hang_timeout_s, own)
    stopper = FirstOf(gpus, hangs) if gpus is not None or hangs is not None else None
    started = time.time()
    try:
        outcome = watch(
            runner.children(), grace_s=grace_s, preempt_grace_s=preempt_grace_s, out=out, err=err, view=view,
            policy=ConsolePolicy(all_ranks=options.all_ranks), fail_fast=runner.fail_fast,
            on_line=on_line, overdue=runner.overdue, hung=stopper, on_tick=owners and owners.observe,
            interrupt_ranks=plan.isaaclab,
        )  # fmt: skip
        if plan.isaaclab and logs is not None:  # where this launch's Isaac Lab run is, for --resume and play
            readers = (reader, getattr(hangs, "reader", None))
            record_run_folder(plan, (getattr(item, "path", None) for item in readers), logs.announced)
        preempted = preemption_since(plan.run_dir, started)
        if plan.isaaclab and outcome.received in PREEMPT_SIGNALS:
            line, resumable = preemption_line(plan, outcome.received)
            err.write(line + "\n")
            status = PREEMPTED_EXIT_CODE if resumable else 128 + outcome.received
        elif preempted is not None and outcome.received in (None, *PREEMPT_SIGNALS):
            # the signal islab-train got; the ranks may have seen another copy first (torchrun's SIGTERM)
            name = signal.Signals(outcome.received).name if outcome.received else preempted.get("signal")
            err.write(
                f"islab-train: preempted by {name}: stopped after iteration "
                f"{preempted.get('iteration')} and checkpointed it; run directory: {os.path.abspath(plan.run_dir)}\n"
            )
            status = PREEMPTED_EXIT_CODE
        elif outcome.received is not None:
            # one quiet line instead of the ranks' and torchrun's tracebacks (silenced by watch)
            name = signal.Signals(outcome.received).name
            err.write(f"islab-train: stopped by {name}; run directory: {os.path.abspath(plan.run_dir)}\n")
            status = 128 + outcome.received
        elif outcome.hung and stopper is not None:
            explanation.write(stopper.message() + "\n")
            status = 1
        else:
            status = runner.explain(outcome, explanation, all_ranks=options.all_ranks)
        if status != 0 and outcome.received is None:
            # NCCL's, gloo's and torch's words for a broken collective path, named with their fix (docs/NCCL.md)
            found = known_failure_lines(plan.run_dir, [line for tail in outcome.tails for line in tail])
            if found:
                explanation = _before_last_line(explanation, found)
    finally:
        view.close()
        runner.close()
        if gpus is not None:
            gpus.close()
        if logs is not None:
            logs.close()
    if status == 0:
        status = _check_digests(plan.run_dir, explanation)
    if status == 0 and options.progress:
        peaks = gpus.summary_text() if gpus is not None else None
        finish(plan.run_dir, out, tty=options.live, resume=resume_command(plan.run_dir), records=view.records,
               extra_rows=[("GPU per rank (peak)", peaks)] if peaks else [])  # fmt: skip
    elif options.progress and plan.isaaclab:
        err.write(resume_hint(plan, resume_command(plan.run_dir)))
    elif options.progress:
        _resume_hint(plan.run_dir, err)
    # A failure's message (rank, node, log, exception) stays the last line, after the resume hint.
    err.write(explanation.getvalue())
    return status


def _before_last_line(explanation: io.StringIO, lines: list[str]) -> io.StringIO:
    """``lines`` inserted before the explanation's last line (the ``error:`` line stays last)."""
    text = explanation.getvalue().rstrip("\n").split("\n")
    merged = io.StringIO()
    merged.write("\n".join([*text[:-1], *lines, text[-1]] if text != [""] else lines) + "\n")
    return merged


def preemption_since(run_dir: str, started: float) -> dict[str, Any] | None:
    """Rank 0's record of a preemption stop of this launch (``summary.json`` written since
    ``started``, epoch seconds, with ``preempted``: signal and iteration), else None."""
    try:
        if Path(summary_path(run_dir)).stat().st_mtime < started:
            return None  # an earlier launch's summary (a run resumed in place)
    except OSError:
        return None
    summary = read_summary(run_dir)
    preempted = summary.get("preempted") if summary else None
    return preempted if isinstance(preempted, dict) else None


def _check_digests(run_dir: str, err: IO[str]) -> int:
    """After a successful run: every rank must end with the same policy. The ranks' final policy
    digests (``digests/rank_<R>.json``: all ranks on a shared file system, else this node's) are
    compared; ranks that differ fail the run with one line naming them (exit 1)."""
    groups = digest_divergence(read_digests(run_dir))
    if groups is None:
        return 0
    where = os.path.join(os.path.abspath(run_dir), DIGESTS_DIR)
    err.write(
        f"error: the ranks ended with different policies: {groups} (sha256 in {where}); gradients or "
        "normalizer statistics were not kept in sync across ranks\n"
    )
    return 1


def _resume_hint(run_dir: str, err: IO[str]) -> None:
    """After a failure or a stop, on node 0: how to continue, when there is something to continue."""
    if latest_checkpoint(run_dir).is_file():
        err.write(f"islab-train: to resume this run:\n  {resume_command(run_dir)}\n")
    else:
        err.write("islab-train: no checkpoint was written yet, so there is nothing to resume.\n")
