"""Which TensorBoard event files are this job's, when several jobs write under one folder.

Isaac Lab's ``train.py`` and mjlab's ``train`` write their runs under ``<working directory>/logs/<lib>/``:
two runs started from one directory (two islab-train commands, two trials of a sweep) write side by
side there, and "the newest event file under that folder" is whichever run wrote last. Following it
made both runs report the second one's numbers. Instead, a file counts as this job's when

* one of the job's processes has it open (``/proc/<pid>/fd``): every writer the libraries use keeps
  its event file open while it trains -- torch's ``SummaryWriter`` (rsl_rl, skrl), tensorboardX's
  (rl_games) and skrl's own; or
* its name carries the process id of one of the job's processes on this host: TensorBoard's naming,
  ``events.out.tfevents.<time>.<host>.<pid>.<n>`` (torch's ``SummaryWriter``), which still tells
  after the writer has closed the file. tensorboardX names its files ``...tfevents.<time>.<host>``,
  without a pid: those are recognised while they are open.

The job's processes are what the supervisor sees below islab-train while the job runs: it hands them
to :meth:`JobEventFiles.observe` on every tick, and every process ever seen is remembered (a rank
that ended still names its file). Linux only, as supervision is.

Torch-free: standard library only.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Collection
from pathlib import Path

from islab.run.tensorboard_progress import EVENT_FILE_MARKER

# TensorBoard's event file name: events.out.tfevents.<10-digit time>.<host>.<pid>.<uid>[suffix]
_TENSORBOARD_NAME = re.compile(r"\.out\.tfevents\.\d+\.(?P<host>.+)\.(?P<pid>\d+)\.\d+")
RESCAN_S = 1.0  # how often the job's open files are listed


class JobEventFiles:
    """The event files under ``root`` that this job's processes wrote (see the module docstring)."""

    def __init__(
        self, root: str | Path, *, host: str | None = None, proc: Path = Path("/proc"), rescan_s: float = RESCAN_S
    ) -> None:
        self.root = os.path.realpath(root)  # /proc shows the real path of an open file
        self.host = host or socket.gethostname()
        self.proc = proc
        self.rescan_s = rescan_s
        self.pids: set[int] = set()
        self.claimed: set[str] = set()  # absolute paths seen open by one of the job's processes
        self._scanned_at = float("-inf")

    def observe(self, pids: Collection[int]) -> None:
        """The job's live processes now: remember them, and list their open event files (at most
        every ``rescan_s`` seconds, or at once when a process is new)."""
        new = set(pids) - self.pids
        self.pids.update(pids)
        now = time.monotonic()
        if not new and now - self._scanned_at < self.rescan_s:
            return
        self._scanned_at = now
        for pid in pids:
            self.claimed.update(self._open_event_files(pid))

    def owns(self, path: str | Path) -> bool:
        """Is ``path`` one of this job's event files?"""
        if os.path.realpath(path) in self.claimed:
            return True
        named = _TENSORBOARD_NAME.search(Path(path).name)
        return bool(named) and int(named["pid"]) in self.pids and named["host"] == self.host

    def _open_event_files(self, pid: int) -> list[str]:
        fd_dir = self.proc / str(pid) / "fd"
        try:
            descriptors = os.listdir(fd_dir)
        except OSError:  # gone, or not ours to read
            return []
        found = []
        for descriptor in descriptors:
            try:
                target = os.readlink(fd_dir / descriptor)
            except OSError:
                continue
            if EVENT_FILE_MARKER in target and target.startswith(self.root + os.sep):
                found.append(target)
        return found
