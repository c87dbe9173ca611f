"""The launcher's side of a user entry point (``--script``, ``--module``, ``--command``, presets).

Our worker writes its own rank log and ``progress.jsonl``; a script of the user's does neither. So
for an entry-point plan the supervisor

* copies every rank's output lines into ``logs/rank_<R>.log`` (:class:`RankLogWriter`, the lines
  attributed by torchrun's ``[default<local_rank>]:`` prefix, or by the skrl-JAX rank that printed
  them), keeping rank 0's last line for the display;
* reads progress from the script's TensorBoard event files (:func:`events_reader`, see
  :mod:`islab.run.tensorboard_progress`) under ``ISLAB_RUN_DIR`` or where a preset's script writes
  them; until events appear (rl_games and skrl flush every 120 s) the display shows the elapsed
  time and rank 0's last log line.

Torch-free, like the rest of the launcher.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from islab.run.console import route_line
from islab.run.tensorboard_progress import TensorBoardProgress
from islab.rundir import rank_log
from islab.rundir.trainer_runs import ANNOUNCEMENTS


class RankLogWriter:
    """``on_line`` hook of the poll loop: append each rank's lines to its log file.

    ``first_rank`` is the global rank of this node's local rank 0 when the lines come from one
    torchrun (prefixed by local rank); None when each child is one rank (skrl-JAX)."""

    def __init__(
        self, run_dir: str, first_rank: int | None, log_of: Callable[[str, int], Path] = rank_log
    ) -> None:  # fmt: skip
        self.run_dir = run_dir
        self.first_rank = first_rank
        self.log_of = log_of  # rundir.rank_log, or rundir.preflight_rank_log for the pre-flight probe
        self.rank0_last: str | None = None  # rank 0's last non-empty line, for the display
        self.announced: list[str] = []  # rank 0's lines naming the trainer's run folder (Isaac Lab prints them)
        self._files: dict[int, IO[str]] = {}
        self._lock = threading.Lock()
        log_of(run_dir, 0).parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, child_rank: int | None, line: str) -> None:
        rank, text = (child_rank, line) if self.first_rank is None else route_line(line, self.first_rank)
        if rank is None:
            return  # the launcher's own lines (torchrun's banner, its failure summary)
        with self._lock:
            handle = self._files.get(rank)
            if handle is None:
                handle = self._files[rank] = open(self.log_of(self.run_dir, rank), "a", encoding="utf-8")  # noqa: SIM115
            handle.write(text if text.endswith("\n") else text + "\n")
            handle.flush()
            if rank == 0 and text.strip():
                self.rank0_last = text.strip()
                if self.rank0_last.startswith(ANNOUNCEMENTS):
                    self.announced.append(self.rank0_last)

    def close(self) -> None:
        with self._lock:
            for handle in self._files.values():
                handle.close()
            self._files.clear()


def events_reader(
    root: str, library: str | None, not_before: float | None, owners: Callable[[Path], bool] | None = None
) -> TensorBoardProgress:
    """A reader of the entry point's TensorBoard events (``library`` None: detected from the tags;
    ``owners``: which files under a shared ``root`` are this job's, see :mod:`islab.run.event_owners`)."""
    return TensorBoardProgress(Path(root), library, not_before=not_before, owners=owners)
