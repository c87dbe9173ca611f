"""Hangs: a job whose ranks stopped making progress is stopped, naming who is stuck and where.

Our worker's ranks rewrite ``<run_dir>/heartbeats/rank_<R>.json`` (:mod:`islab.rundir`) when
training starts and after every iteration they finish. :class:`HangWatch`, polled by the one poll
loop (:func:`islab.run.processes.watch`), considers the heartbeats of this node's live ranks
(written on this host by a pid below islab-train): once training started -- some rank finished an
iteration in this process; the first one includes warm-up, and the rendezvous has its own timeout --
a job where no rank finished an iteration for ``timeout_s`` seconds is hung. Then every such rank
gets :data:`~islab.rundir.STACK_DUMP_SIGNAL`, on which faulthandler writes all its Python thread
stacks to its log (``py-spy dump`` adds native frames when py-spy is installed), the ranks that are
behind are named with the innermost frame of their main thread (:func:`innermost_frame`), and the
poll loop stops the job; islab-train exits 1.

A user's entry point (``--script``/``--module``/``--command``, the presets) writes no heartbeats:
its hang watch reads its TensorBoard events instead (:mod:`islab.run.event_hangs`). Each node
watches its own ranks (it can only signal those); on several nodes, every node whose ranks wait for
a stuck peer reports its own.

Pure parts (:func:`innermost_frame`, :func:`ranks_behind`, :func:`hang_message`) are separate from
the process work, which needs only ``os.kill`` and the rank logs: no torch.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab.rundir import STACK_DUMP_SIGNAL, rank_log, read_heartbeats

CHECK_INTERVAL_S = 1.0  # how often the heartbeats are read
DUMP_WAIT_S = 5.0  # how long a rank's faulthandler dump may take to reach its log
PY_SPY_TIMEOUT_S = 8.0  # all py-spy dumps together

# faulthandler: "Thread 0x00007f... (most recent call first):" or "Current thread 0x... (...):",
# then one line per frame, innermost first: '  File "x.py", line 12 in func'.
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


def innermost_frame(dump: str, thread: int | None = None, *, oldest: bool = False) -> Frame | None:
    """The innermost frame of ``thread`` (faulthandler's id, ``threading.get_ident()``) in the last
    faulthandler dump of ``dump``; without it (or when that thread is not in the dump), of the
    "Current thread" block, else of the dump's last thread (the oldest: the main thread). ``oldest``:
    the last thread's, whichever thread was current (a fatal signal lands on any thread)."""
    blocks: list[tuple[int, bool, list[Frame]]] = []
    for line in dump.splitlines():
        header = _THREAD.match(line)
        if header:
            ident = int(header.group(1), 16)
            if any(ident == seen for seen, _, _ in blocks):
                blocks = []  # a later dump of the same process: keep only the newest
            blocks.append((ident, line.startswith("Current"), []))
            continue
        frame = _FRAME.match(line)
        if frame and blocks:
            blocks[-1][2].append(Frame(frame["file"], int(frame["line"]), frame["func"]))
    with_frames = [block for block in blocks if block[2]]
    if not with_frames:
        return None
    chosen = next((block for block in with_frames if block[0] == thread), None)
    if oldest:
        chosen = chosen or with_frames[-1]
    chosen = chosen or next((block for block in with_frames if block[1]), None) or with_frames[-1]
    return chosen[2][0]


def ranks_behind(iterations: Mapping[int, int]) -> list[int]:
    """The ranks whose last finished iteration is below the others'; all of them when they agree
    (then none is behind, and the stacks must tell)."""
    if not iterations:
        return []
    newest = max(iterations.values())
    behind = sorted(rank for rank, iteration in iterations.items() if iteration < newest)
    return behind or sorted(iterations)


@dataclass(frozen=True)
class Stuck:
    """One rank of a hung job: its last finished iteration, log and innermost frame."""

    rank: int
    iteration: int
    log: str
    frame: Frame | None


def hang_message(timeout_s: float, stuck: Sequence[Stuck], behind: Sequence[int], run_dir: str) -> str:
    """The one error line for a hung job."""
    named = [item for item in stuck if item.rank in behind]
    others = sorted({item.iteration for item in stuck if item.rank not in behind})
    where = "; ".join(f"rank {item.rank} at {item.frame or 'an unknown place (no stack in its log)'}" for item in named)
    ranks = ", ".join(str(item.rank) for item in named)
    if others:
        lagging = sorted({item.iteration for item in named})
        head = (
            f"{'rank' if len(named) == 1 else 'ranks'} {ranks} {'is' if len(named) == 1 else 'are'} behind "
            f"(last finished iteration {', '.join(map(str, lagging))}; the others {', '.join(map(str, others))})"
        )
    else:
        iteration = named[0].iteration if named else 0
        head = f"no rank is behind (all finished iteration {iteration}; the stacks tell which one is stuck)"
    logs = ", ".join(item.log for item in named)
    return (
        f"error: hang: no rank finished an iteration for {timeout_s:g} s (--hang-timeout); {head}: {where}; "
        f"every thread's stack is in {logs}. The job was stopped. Run directory: {run_dir}"
    )


class HangWatch:
    """Decides from the heartbeats when this node's ranks are hung, then has them dump their
    stacks; :meth:`message` names them afterwards. Called by the poll loop with the pids of the
    job's live processes (the ranks are among them)."""

    def __init__(
        self, run_dir: str, timeout_s: float, *, clock: Callable[[], float] = time.monotonic,
        host: str | None = None,
    ) -> None:  # fmt: skip
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self.clock = clock
        self.host = host or socket.gethostname()
        self._seen: dict[int, tuple[int, int]] = {}  # rank -> (pid, done) last read
        self._progress_at: float | None = None  # when a rank last finished an iteration
        self._checked_at = float("-inf")
        self.stuck: list[Stuck] = []
        self.behind: list[int] = []

    def ours(self, live_pids: Collection[int]) -> dict[int, dict[str, Any]]:
        """This node's live ranks' heartbeats (a shared run directory holds other nodes' too, and
        a restarted worker group's dead ranks')."""
        return {
            rank: beat
            for rank, beat in read_heartbeats(self.run_dir).items()
            if beat["pid"] in live_pids and beat.get("host", self.host) == self.host
        }

    def __call__(self, live_pids: Collection[int]) -> bool:
        """True once the job is hung (its ranks' stacks are then in their logs)."""
        now = self.clock()
        if now - self._checked_at < CHECK_INTERVAL_S:
            return False
        self._checked_at = now
        beats = self.ours(live_pids)
        for rank, beat in beats.items():
            state = (beat["pid"], beat["done"])
            if beat["done"] > 0 and self._seen.get(rank) != state:
                self._progress_at = now
            self._seen[rank] = state
        if not any(beat["done"] > 0 for beat in beats.values()):
            self._progress_at = None  # not training yet (warm-up, or a restarted group)
            return False
        if self._progress_at is None:
            self._progress_at = now
        if now - self._progress_at < self.timeout_s:
            return False
        self.behind = ranks_behind({rank: beat["iteration"] for rank, beat in beats.items()})
        self.stuck = dump_stacks(self.run_dir, beats)
        return True

    def message(self) -> str:
        return hang_message(self.timeout_s, self.stuck, self.behind, self.run_dir)


def dump_stacks(run_dir: str, beats: Mapping[int, Mapping[str, Any]]) -> list[Stuck]:
    """Signal every rank to dump its stacks into its log, wait for the dumps, add py-spy's when it
    is installed, and read each rank's innermost frame back."""
    logs = {rank: rank_log(run_dir, rank) for rank in beats}
    before = {rank: file_size(log) for rank, log in logs.items()}
    for beat in beats.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(beat["pid"], STACK_DUMP_SIGNAL)
    # faulthandler writes "... thread 0x<16 hex digits> ..." for the main thread, the last one listed
    waiting = {rank: f"0x{beat.get('thread') or 0:016x} " for rank, beat in beats.items()}
    deadline = time.monotonic() + DUMP_WAIT_S
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        waiting = {rank: mark for rank, mark in waiting.items() if mark not in read_from(logs[rank], before[rank])}
    time.sleep(0.2)  # the main thread's frames follow its header
    frames = {
        rank: innermost_frame(read_from(logs[rank], before[rank]), beat.get("thread")) for rank, beat in beats.items()
    }
    py_spy_dumps(logs, {rank: beat["pid"] for rank, beat in beats.items()})
    return [Stuck(rank, beats[rank]["iteration"], str(logs[rank]), frames[rank]) for rank in sorted(beats)]


def py_spy_dumps(logs: Mapping[int, Path], pids: Mapping[int, int]) -> None:
    """``py-spy dump --native`` of every rank appended to its log, when py-spy is on PATH (it may
    lack the permission to attach: then its error is what gets appended)."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        return
    command = [py_spy, "dump", "--native", "--pid"]
    running = {
        rank: subprocess.Popen([*command, str(pid)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank, pid in pids.items()
    }
    deadline = time.monotonic() + PY_SPY_TIMEOUT_S
    for rank, process in running.items():
        try:
            output, _ = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            output = f"(py-spy did not finish within {PY_SPY_TIMEOUT_S:g} s)\n"
        with contextlib.suppress(OSError), open(logs[rank], "a", encoding="utf-8") as log:
            log.write(f"\n[islab] py-spy dump --native --pid {pids[rank]} (the launcher's hang watch):\n{output}")


def file_size(path: Path | None) -> int:
    """Bytes in ``path`` now (0: missing, or no file)."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def read_from(path: Path | None, offset: int) -> str:
    """What ``path`` holds from byte ``offset`` on (``""``: missing, or no file)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
