"""Processes: start them in groups of their own, forward signals, stream their output, watch them.

A launcher started from a terminal must behave like one program, even though it is a tree of
processes (islab-train -> torchrun -> N ranks, or islab-train -> N JAX ranks):

* **One process group per child.** Children start in a new session (``start_new_session=True``),
  so a signal can reach the whole tree with ``os.killpg`` -- including ranks a launcher started --
  and nothing is left behind. Never ``shell=True``: argv goes to ``exec`` as-is.
* **Signals are forwarded.** SIGINT sent to islab-train goes to every group, and SIGTERM to every
  rank; whatever is still alive after a grace period (5 s) gets SIGKILL, so 10 s after the signal
  nothing of the job is left. A preempting signal (SIGTERM, SIGUSR1: :mod:`islab.spec.stopping`) asks
  for a stop with a checkpoint instead: SIGTERM to every group (torchrun forwards it to its ranks
  and waits for them), SIGUSR1 to every rank (torchrun forwards no SIGUSR1), and SIGKILL only
  :data:`~islab.spec.stopping.PREEMPT_GRACE_S` later. A SIGINT during that wait stops everything at
  once. A trainer that stops cleanly on Ctrl-C instead (Isaac Lab's) gets SIGINT, to its ranks only
  (``interrupt_ranks``, :meth:`ProcessGroups.interrupt`). torchrun starts each rank in a session of its own, out of
  reach of ``killpg(torchrun)``, so the process tree below our children is read from ``/proc``
  while the job runs (:func:`islab.run.process_tree.process_tree`) and those processes are signalled too.
* **One poll loop** (:func:`watch`) for both launchers: it streams every child's output through
  the console policy, ticks the progress display, and stops everything on a signal, on the first
  failed child (``fail_fast``: skrl-JAX ranks, whose peers would hang), when the launcher says
  the rendezvous is overdue, or when the hang watch (:mod:`islab.run.hangs`) says no rank
  makes progress any more. What the outcome means is the launcher's to say
  (:mod:`islab.plan.torchrun`, :mod:`islab.plan.skrl_jax`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from islab.run.console import ConsolePolicy, RunView, Stream, TracebackCondenser, rank_prefix, route_line
from islab.run.process_tree import process_tree, read_stat
from islab.spec.stopping import PREEMPT_GRACE_S, PREEMPT_SIGNALS

# Where a launcher's own report of a failed rank begins (torchrun: "Sending process P closing signal
# SIGTERM" to the ranks still running, the "failed (exitcode: 1) local_rank: R" error record, its
# traceback, the ChildFailedError table). It repeats what the rank already said, in 30-40 lines; the
# supervisor's one error line names the rank, its exception (from torch's error file) and its log
# instead, so the dump is kept off the console (the supervisor still reads it from the output tail
# to find the failed rank).
_LAUNCHER_FAILURE = re.compile(
    r"failed \(exitcode: -?\d+\) local_rank:|^Traceback \(most recent call last\)|ChildFailedError"
    r"|Sending process \d+ closing signal"
)

POLL_INTERVAL_S = 0.05
TICK_INTERVAL_S = 0.25  # how often the progress display re-reads progress.jsonl
FORWARDED_SIGNALS = (signal.SIGINT, *PREEMPT_SIGNALS)


def exit_code_of(returncode: int) -> int:
    """Popen's returncode -> a shell exit status (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


class ProcessGroups:
    """The children we started, each leading its own process group, and the signals we got.

    torchrun starts every rank in a session of its own, so ``killpg`` of torchrun's group does not
    reach the ranks. Every process below our children is therefore remembered while the job runs
    (:meth:`track`, called from the poll loops and right before any signal is sent), and stopping
    the job signals those too: nothing of the job outlives islab-train's exit, even when torchrun
    itself has to be SIGKILLed.
    """

    def __init__(self, grace_s: float, preempt_grace_s: float = PREEMPT_GRACE_S, *, interrupt_ranks: bool = False):
        self.grace_s = grace_s
        self.preempt_grace_s = preempt_grace_s
        # A trainer that stops cleanly on Ctrl-C (Isaac Lab's): a preempting signal becomes SIGINT to its ranks
        self.interrupt_ranks = interrupt_ranks
        self.rank_children: set[int] = set()  # children that are ranks themselves (skrl-JAX)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.received: int | None = None
        self.tracked: dict[int, int] = {}  # pid -> start time, every descendant seen so far
        self._previous: dict[int, Any] = {}

    def start(
        self, argv: Iterable[str], env: Mapping[str, str], *, is_rank: bool = False, **popen: Any
    ) -> subprocess.Popen[bytes]:
        # The child starts with SIGUSR1 ignored (an ignored signal stays ignored across exec, down to
        # the ranks, whose worker handles it once training starts): SLURM delivers a forwarded SIGUSR1
        # to every process of the step, and torchrun, which does not handle it, would die of it and
        # take the ranks down before they checkpoint. Our own handler is back right after the fork.
        ignoring = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN) if ignoring else None
        try:
            process = subprocess.Popen(list(argv), env={**os.environ, **env}, start_new_session=True, **popen)
        finally:
            if ignoring:
                signal.signal(signal.SIGUSR1, previous)
        self.processes.append(process)
        if is_rank:
            self.rank_children.add(process.pid)
        return process

    def track(self) -> None:
        """Remember the descendants of our children that are alive now."""
        live = [process.pid for process in self.processes if process.returncode is None]
        if live:
            self.tracked.update(process_tree(live))

    def signal_all(self, signum: int, descendants: int | None = None) -> None:
        """``signum`` to every child's group; ``descendants`` (default: the same signal) to every
        remembered descendant still alive -- to its group where it leads one (a torchrun rank)."""
        self.track()
        for process in self.processes:
            # The group outlives its leader when grandchildren (ranks) are still running.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signum)
        for pid, start in list(self.tracked.items()):
            stat = read_stat(pid)
            if stat is None or stat[1] != start:
                del self.tracked[pid]  # gone (or its pid now belongs to someone else)
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signum if descendants is None else descendants)
                else:
                    os.kill(pid, signum if descendants is None else descendants)

    def interrupt(self) -> None:
        """SIGINT to every rank's process group, once each: the ranks we started, and below a launcher
        the processes that lead a group of their own (torchrun starts each rank in a new session). The
        launcher itself gets nothing (torchrun would SIGTERM its ranks at once); it ends after them.
        A second SIGINT would cut a rank's shutdown short (Isaac Lab 3 exits at once on it)."""
        self.track()
        leaders = {process.pid for process in self.processes if process.pid in self.rank_children}
        for pid, start in self.tracked.items():
            stat = read_stat(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if stat is not None and stat[1] == start and os.getpgid(pid) == pid:
                    leaders.add(pid)
        for leader in leaders:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, signal.SIGINT)

    def live_pids(self) -> set[int]:
        """Our children and their remembered descendants (:meth:`track`) that are still the
        processes we saw."""
        live = {process.pid for process in self.processes if process.returncode is None}
        for pid, start in self.tracked.items():
            stat = read_stat(pid)
            if stat is not None and stat[1] == start:
                live.add(pid)
        return live

    @property
    def preempting(self) -> bool:
        """Stopping with a checkpoint (a preempting signal came first, and no SIGINT since)."""
        return self.received in PREEMPT_SIGNALS

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.received is not None and signum in PREEMPT_SIGNALS:
            return  # a copy (SLURM signals every process of the step; torchrun forwards): already under way
        if self.preempting:  # SIGINT while the ranks finish their iteration: stop now
            self.received = signum
            self.signal_all(signal.SIGKILL)
            return
        self.received = signum
        if signum in PREEMPT_SIGNALS and self.interrupt_ranks:
            self.interrupt()
            return
        if signum in PREEMPT_SIGNALS:
            # torchrun forwards SIGTERM to its ranks and waits for them; SIGUSR1 to every rank is for
            # the ranks torchrun does not forward to (it forwards no SIGUSR1) and for skrl-JAX ranks.
            self.signal_all(signal.SIGTERM, descendants=signal.SIGUSR1)
            return
        # The launcher gets the signal itself (torchrun shuts its workers down); the ranks get
        # SIGKILL: a Python KeyboardInterrupt would wait for a C++ collective to return, and
        # SIGTERM now means "finish the iteration and checkpoint".
        self.signal_all(signum, descendants=signal.SIGKILL)

    def __enter__(self) -> ProcessGroups:
        if threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        # Nothing we started may outlive us: kill what is left of every group and every rank.
        self.signal_all(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def stop_all(self, signum: int = signal.SIGTERM) -> None:
        """Ask every group to stop, then SIGKILL whatever is still alive after the grace period."""
        self.signal_all(signum)
        self.wait_all(self.grace_s)
        if any(process.poll() is None for process in self.processes):
            self.signal_all(signal.SIGKILL)
            self.wait_all(5.0)

    def wait_all(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(process.poll() is not None for process in self.processes):
                return True
            time.sleep(POLL_INTERVAL_S)
        return all(process.poll() is not None for process in self.processes)

    def escalate_if_signalled(self, since: list[float]) -> None:
        """Called from the poll loop: after a forwarded signal, SIGKILL once the grace is over."""
        if self.received is None:
            return
        if not since:
            since.append(time.monotonic())
        elif time.monotonic() - since[0] > (self.preempt_grace_s if self.preempting else self.grace_s):
            self.signal_all(signal.SIGKILL)


# ----------------------------------------------------------------------------------------------
# The poll loop
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Child:
    """One process islab-train starts: a launcher whose worker lines carry a local-rank prefix
    (``first_rank``: the global rank of its local rank 0), or one rank (``rank``)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    rank: int | None = None
    first_rank: int | None = None
    tail_lines: int = 200  # output kept for the failure message
    stderr_to_stdout: bool = False  # a rank's stderr shares the console's stdout (skrl-JAX ranks)


@dataclass
class Outcome:
    """How the children ended: exit statuses (shell convention), the signal islab-train received,
    the first child seen failing, whether the rendezvous ran out of time or the job hung, and their
    last lines."""

    statuses: list[int] = field(default_factory=list)
    received: int | None = None
    first_failed: int | None = None
    overdue: bool = False
    hung: bool = False
    tails: list[deque[str]] = field(default_factory=list)


def _pump(
    pipe: IO[bytes],
    sink: IO[str],
    stream: Stream,
    child: Child,
    tail: deque[str],
    view: RunView,
    policy: ConsolePolicy,
    on_line: Callable[[int | None, str], None],
    stopping: Callable[[], bool],
) -> None:
    """Copy a child's output line by line to the console, as the policy allows, keeping the last
    lines for messages. A launcher's worker lines are attributed by their local-rank prefix.
    Once islab-train was told to stop, nothing more is shown: the ranks' KeyboardInterrupt and
    torchrun's shutdown tracebacks are the expected end, not news (they stay in the logs)."""
    dumping = False  # torchrun's own failure dump has begun: the rest stays out of the console
    tracebacks = None if policy.all_ranks else TracebackCondenser(view.run_dir)
    for raw in iter(pipe.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        tail.append(line.rstrip("\n"))
        on_line(child.rank, line)
        line_rank, text = (child.rank, line) if child.first_rank is None else route_line(line, child.first_rank)
        if child.first_rank is not None and line_rank is None and _LAUNCHER_FAILURE.search(text):
            dumping = True
        shown = text if line_rank is None or tracebacks is None else tracebacks.condense(line_rank, text)
        if shown is None or stopping() or (dumping and line_rank is None):
            continue
        if policy.shows(line_rank, stream, shown):
            view.emit(rank_prefix(line_rank) + shown, sink)
    pipe.close()


def _start_pump(pipe: IO[bytes] | None, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=_pump, args=(pipe, *args), daemon=True)
    thread.start()
    return thread


def watch(
    children: Iterable[Child],
    *,
    grace_s: float,
    preempt_grace_s: float = PREEMPT_GRACE_S,
    out: IO[str],
    err: IO[str],
    view: RunView,
    policy: ConsolePolicy,
    fail_fast: bool,
    on_line: Callable[[int | None, str], None],
    overdue: Callable[[], bool],
    hung: Callable[[set[int]], bool] | None = None,
    on_tick: Callable[[set[int]], None] | None = None,
    interrupt_ranks: bool = False,
) -> Outcome:
    """Run ``children`` to the end (see the module docstring) and report how they ended.
    ``hung`` gets the pids of the job's live processes on every tick; True stops the job. ``on_tick``
    gets them too, before the view reads progress (:class:`islab.run.event_owners.JobEventFiles`).
    ``interrupt_ranks``: a preempting signal stops the ranks with SIGINT (:meth:`ProcessGroups.interrupt`)."""
    children = list(children)
    outcome = Outcome(tails=[deque(maxlen=child.tail_lines) for child in children])
    signalled_at: list[float] = []
    with ProcessGroups(grace_s, preempt_grace_s, interrupt_ranks=interrupt_ranks) as groups:
        processes, pumps = [], []
        for child, tail in zip(children, outcome.tails, strict=True):
            process = groups.start(
                child.argv, child.env, is_rank=child.rank is not None, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            processes.append(process)
            err_sink = out if child.stderr_to_stdout else err
            # After a signal or a hang the stop is ours: its tracebacks are not news (the logs keep them).
            stopping = lambda: groups.received is not None or outcome.hung  # noqa: E731
            pumps.append(_start_pump(process.stdout, out, "out", child, tail, view, policy, on_line, stopping))
            pumps.append(_start_pump(process.stderr, err_sink, "err", child, tail, view, policy, on_line, stopping))
        # Poll every child each round (a short-circuiting any() would never see a later one die).
        last_tick = 0.0
        while [process.poll() for process in processes].count(None):
            groups.escalate_if_signalled(signalled_at)
            ticked = time.monotonic() - last_tick >= TICK_INTERVAL_S
            if ticked:
                groups.track()
                if on_tick is not None:
                    on_tick(groups.live_pids())
                view.tick()
                last_tick = time.monotonic()
            if groups.received is None and outcome.first_failed is None and not (outcome.overdue or outcome.hung):
                failed = next((i for i, p in enumerate(processes) if p.returncode not in (None, 0)), None)
                if failed is not None:
                    outcome.first_failed = failed
                    if fail_fast:
                        groups.stop_all(signal.SIGTERM)  # peers of a dead rank may block forever
                elif overdue():
                    outcome.overdue = True
                    groups.stop_all(signal.SIGTERM)
                elif hung is not None and ticked and hung(groups.live_pids()):
                    outcome.hung = True
                    groups.stop_all(signal.SIGTERM)
            time.sleep(POLL_INTERVAL_S)
        for pump in pumps:
            pump.join(timeout=5)
    view.close()
    outcome.received = groups.received
    outcome.statuses = [exit_code_of(process.returncode) for process in processes]
    if outcome.first_failed is None and outcome.received is None and not (outcome.overdue or outcome.hung):
        outcome.first_failed = next((i for i, status in enumerate(outcome.statuses) if status != 0), None)
    return outcome
