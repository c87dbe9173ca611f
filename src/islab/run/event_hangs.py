"""Hangs of a trainer we did not write (Isaac Lab's, mjlab's, a user's script): progress from its own
TensorBoard events, every rank's Python stacks without any code of ours in the ranks.

Our worker's ranks write heartbeats (:mod:`islab.run.hangs`); another trainer writes only its
TensorBoard events, on rank 0. So the job is hung when the trainer's events show no new iteration for
``--hang-timeout`` seconds, counted from the first iteration they show (start-up, the simulator's
and the first iteration's, may take long; the rendezvous has its own timeout). Isaac Lab's rl_games
and skrl flush their events every 120 s: the default timeout (at least 600 s) is well above that;
a shorter ``--hang-timeout`` must be too.

Then every rank's stacks go to its log, by two means that need nothing inside the ranks:

* ``py-spy dump --native`` of each rank, when py-spy is on PATH (:func:`islab.run.hangs.py_spy_dumps`);
* Python's faulthandler, switched on for every rank through its environment at launch
  (``PYTHONFAULTHANDLER=1``, :func:`with_fault_handler`; a value the user set is kept): the hang watch
  sends each rank SIGABRT, on which faulthandler writes all its threads' stacks to the rank's stderr
  and the rank ends (the job is stopped anyway). The dump reaches the rank log through torchrun's
  ``--tee``; when the rank's stderr is a file (torchrun's per-rank log), the dump is also read from
  there, in case torchrun stopped copying before it arrived. A process whose own code catches
  SIGABRT (Isaac Sim's Kit installs crash handlers, Isaac Lab 2.x's AppLauncher a Python handler)
  does not dump: py-spy is the way there.

The ranks are found among the job's processes by their environment: torchrun gives each its
``RANK`` (skrl's JAX launcher ``JAX_RANK``); the topmost process holding a rank's number is that rank
(:func:`rank_processes`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from islab.plan.launch_plan import LaunchPlan
from islab.run.hangs import CHECK_INTERVAL_S, DUMP_WAIT_S, Frame, file_size, innermost_frame, py_spy_dumps, read_from
from islab.run.process_tree import parent_pid
from islab.rundir import rank_log

FAULT_HANDLER_VARIABLE = "PYTHONFAULTHANDLER"
DUMP_SIGNAL = signal.SIGABRT  # one of faulthandler's fatal signals: it dumps every thread, then the rank ends
FATAL_MARK = "Fatal Python error"  # the first line of faulthandler's fatal dump
RANK_VARIABLES = ("RANK", "JAX_RANK")


def with_fault_handler(plan: LaunchPlan, environ: Mapping[str, str]) -> LaunchPlan:
    """``plan`` whose ranks start with faulthandler on (``PYTHONFAULTHANDLER=1``), unless this
    environment (``environ``) or the plan's already says what it should be."""
    if FAULT_HANDLER_VARIABLE in environ:
        return plan

    def added(env: Mapping[str, str]) -> dict[str, str]:
        return {FAULT_HANDLER_VARIABLE: "1", **env}

    nodes = tuple(
        replace(node, env=added(node.env), ranks=tuple(replace(rank, env=added(rank.env)) for rank in node.ranks))
        for node in plan.nodes
    )
    return replace(plan, nodes=nodes)


def rank_processes(pids: Collection[int], proc: Path = Path("/proc")) -> dict[int, int]:
    """``{global rank: pid}`` of the ranks among ``pids``: processes whose environment holds a rank
    number that their parent's does not (a rank's own children inherit it)."""
    ranks: dict[int, int] = {}
    for pid in sorted(pids):
        rank, parent = _rank_of(pid, proc), parent_pid(pid, proc)
        if rank is None or parent is None or _rank_of(parent, proc) == rank:
            continue
        ranks.setdefault(rank, pid)
    return ranks


def _rank_of(pid: int, proc: Path) -> int | None:
    try:
        environ = (proc / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    values = dict(item.decode(errors="replace").partition("=")[::2] for item in environ if b"=" in item)
    for name in RANK_VARIABLES:
        with contextlib.suppress(KeyError, ValueError):
            return int(values[name])
    return None


class EventHangWatch:
    """The hang watch of an entry point (see the module docstring): ``reader`` gives its progress
    records (:class:`islab.run.tensorboard_progress.TensorBoardProgress`, the job's own files)."""

    def __init__(
        self, run_dir: str, timeout_s: float, reader: Any, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self.reader = reader
        self.clock = clock
        self.iteration: int | None = None  # the newest iteration the events showed
        self._progress_at = 0.0
        self._checked_at = float("-inf")
        self.frames: dict[int, Frame | None] = {}

    def __call__(self, live_pids: Collection[int]) -> bool:
        """True once the job is hung (its ranks' stacks are then in their logs)."""
        now = self.clock()
        if now - self._checked_at < CHECK_INTERVAL_S:
            return False
        self._checked_at = now
        newest = max((record["iteration"] for record in self.reader.poll()), default=None)
        if newest is not None and (self.iteration is None or newest > self.iteration):
            self.iteration, self._progress_at = newest, now
        if self.iteration is None or now - self._progress_at < self.timeout_s:
            return False
        self.frames = dump_rank_stacks(self.run_dir, rank_processes(live_pids))
        return True

    def message(self) -> str:
        where = "; ".join(
            f"rank {rank} at {frame or 'an unknown place (no stack in its log: install py-spy)'}"
            for rank, frame in sorted(self.frames.items())
        )
        logs = ", ".join(str(rank_log(self.run_dir, rank)) for rank in sorted(self.frames))
        return (
            f"error: hang: the trainer's TensorBoard events showed no new iteration for {self.timeout_s:g} s "
            f"(--hang-timeout; the last was iteration {self.iteration}): {where or 'no rank process found'}; "
            f"every thread's stack is in {logs or 'the rank logs'}. The job was stopped. Run directory: {self.run_dir}"
        )


def dump_rank_stacks(run_dir: str, ranks: Mapping[int, int]) -> dict[int, Frame | None]:
    """py-spy's dumps (when installed), then faulthandler's: SIGABRT to every rank, the dumps waited
    for in the rank logs (or read from the ranks' stderr files), and each rank's innermost frame of
    its main thread (the last one faulthandler lists)."""
    logs = {rank: rank_log(run_dir, rank) for rank in ranks}
    py_spy_dumps(logs, ranks)
    stderr = {rank: _stderr_file(pid) for rank, pid in ranks.items()}
    before = {rank: (file_size(logs[rank]), file_size(stderr[rank])) for rank in ranks}
    for pid in ranks.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, DUMP_SIGNAL)
    dumps: dict[int, str] = {}
    deadline = time.monotonic() + DUMP_WAIT_S
    while len(dumps) < len(ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
        for rank in ranks:
            text = read_from(logs[rank], before[rank][0]) or read_from(stderr[rank], before[rank][1])
            if FATAL_MARK in text:
                dumps[rank] = text
    time.sleep(0.3)  # the last thread's frames follow its header
    frames = {}
    for rank in ranks:
        in_log = read_from(logs[rank], before[rank][0])
        text = in_log if FATAL_MARK in in_log else read_from(stderr[rank], before[rank][1])
        if FATAL_MARK in text and FATAL_MARK not in in_log:  # torchrun stopped copying before it came
            with contextlib.suppress(OSError), open(logs[rank], "a", encoding="utf-8") as log:
                log.write(f"\n[islab] faulthandler's dump of rank {rank}, from its stderr file:\n{text}")
        frames[rank] = innermost_frame(text, oldest=True) if FATAL_MARK in text else None
    return frames


def _stderr_file(pid: int) -> Path | None:
    """The regular file a process writes its stderr to (torchrun's per-rank log under --tee), if any."""
    try:
        target = Path(os.readlink(f"/proc/{pid}/fd/2"))
    except OSError:
        return None
    return target if target.is_file() else None
