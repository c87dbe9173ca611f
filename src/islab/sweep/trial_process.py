"""One trial's islab-train process: start it, follow its metrics, stop it (no Ray here).

The trial is started in its own session (process group), so stopping it reaches islab-train and,
through it, torchrun and every rank: SIGTERM first (islab-train asks its ranks to checkpoint and
stop, exit 75), SIGKILL to the whole group after a grace period. Its output goes to
``<trial>/islab-train.log``; its run directory is the one islab-train creates under the trial's
log directory (found by its ``launch.yaml``).

Metrics come from the run directory as it grows: ``progress.jsonl`` for our worker
(:class:`islab.rundir.ProgressReader`), TensorBoard event files for an entry point of the user's
(:func:`islab.run.entrypoint.events_reader`). :class:`MetricWindow` turns them into the
sweep's metric: the mean of the last ``over_last`` iterations' values.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from islab.run.entrypoint import events_reader
from islab.run.event_owners import JobEventFiles
from islab.run.failures import last_exception_line
from islab.run.process_tree import process_tree
from islab.rundir import (
    LAUNCH_FILE,
    ProgressReader,
    latest_checkpoint,
    progress_path,
    rank_log,
    read_lines,
    read_summary,
)
from islab.spec.stopping import PREEMPT_GRACE_S
from islab.sweep.trials import CLI_MODULE

OUTPUT_LOG = "islab-train.log"
# islab-train gives its ranks PREEMPT_GRACE_S to checkpoint after SIGTERM, then SIGKILLs them itself.
STOP_GRACE_S = PREEMPT_GRACE_S + 10.0
# The trial's process group while it runs: the driver's last resort when a trial's actor died
# without stopping it (Ray shut down under it).
PGID_FILE = "pgid"


@dataclass(frozen=True)
class ProgressSource:
    """Where a trial's progress is read: ``progress.jsonl`` (``events`` False), or TensorBoard
    events under ``events_root`` (None: the run directory; relative: to the trial's working
    directory) for ``library`` (None: detect it)."""

    events: bool = False
    events_root: str | None = None
    library: str | None = None


class MetricWindow:
    """The sweep's metric of one trial: the mean of ``name`` over the last ``over_last`` records."""

    def __init__(self, name: str, over_last: int) -> None:
        self.name = name
        self.values: deque[float] = deque(maxlen=over_last)
        self.curve: list[tuple[int | None, float]] = []  # (env steps, value) of every iteration

    def add(self, record: Mapping[str, Any]) -> None:
        value = record.get(self.name)
        if isinstance(value, int | float):
            self.values.append(float(value))
            steps = record.get("job_env_steps", record.get("env_steps"))
            self.curve.append((int(steps) if isinstance(steps, int | float) else None, float(value)))

    @property
    def value(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None


def find_run_dir(log_dir: str | Path, *, besides: Iterable[Path] = ()) -> Path | None:
    """The newest run directory islab-train made under ``log_dir`` (``<lib>/<task>/<time>``), other
    than those in ``besides``."""
    skip = set(besides)
    found = sorted(
        (path for path in Path(log_dir).glob(f"*/*/*/{LAUNCH_FILE}") if path.parent not in skip),
        key=lambda path: path.stat().st_mtime,
    )
    return found[-1].parent if found else None


def preempted_at(log_dir: str | Path) -> tuple[Path, int] | None:
    """An earlier, interrupted attempt's run directory and the iteration it checkpointed when it was
    stopped (SIGTERM: our worker checkpoints, records ``preempted`` in summary.json, exits 75)."""
    run_dir = find_run_dir(log_dir)
    if run_dir is None or not latest_checkpoint(run_dir).is_file():
        return None
    preempted = (read_summary(run_dir) or {}).get("preempted") or {}
    iteration = preempted.get("iteration")
    return (run_dir, iteration) if isinstance(iteration, int) else None


def continuation_argv(
    argv: Sequence[str], log_dir: str | Path, target_iteration: int | None
) -> tuple[list[str], str | None]:
    """The argv that finishes a trial: ``--resume RUN_DIR --max-iterations <what is left>`` when an
    earlier attempt was stopped after a checkpoint (what is left, said explicitly: the trial's target
    comes from the sweep, not from the run), else the trial's own argv (a new run directory). Also
    returns the run directory resumed."""
    found = preempted_at(log_dir) if target_iteration is not None else None
    if found is None or target_iteration is None or found[1] >= target_iteration:
        return list(argv), None
    run_dir, iteration = found
    resume = [
        argv[0],
        "-m",
        CLI_MODULE,
        "--resume",
        str(run_dir),
        "--max-iterations",
        str(target_iteration - iteration),
    ]
    return resume, str(run_dir)


class TrialProcess:
    """islab-train for one trial, in its own process group. Its run directory is ``run_dir`` when
    it continues one (``--resume RUN_DIR``), else the one it makes: not one an earlier attempt made
    under the same log directory (stopped before its first checkpoint, so started again)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        log_dir: str,
        source: ProgressSource,
        run_dir: str | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.log_dir = Path(log_dir)
        self.source = source
        self.output_log = self.log_dir / OUTPUT_LOG
        self.process: subprocess.Popen[bytes] | None = None
        self.run_dir: Path | None = None if run_dir is None else Path(run_dir)
        self._earlier: list[Path] = []
        self.started_at = 0.0
        self._reader: Any = None
        self._log: IO[bytes] | None = None
        # A trainer writing under a folder others may share: only this trial's processes' files count
        self._owners = JobEventFiles(Path(cwd, source.events_root)) if source.events and source.events_root else None

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._earlier = [path.parent for path in self.log_dir.glob(f"*/*/*/{LAUNCH_FILE}")]
        self._log = open(self.output_log, "ab")  # noqa: SIM115 -- closed in finish()
        self.started_at = time.time()
        self.process = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        (self.log_dir / PGID_FILE).write_text(str(self.process.pid), encoding="utf-8")

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def new_records(self) -> list[dict[str, Any]]:
        """Progress records that appeared since the last call (the last one per iteration)."""
        if self._owners is not None and self.process is not None and self.process.poll() is None:
            self._owners.observe({self.process.pid, *process_tree([self.process.pid])})
        if self._reader is None:
            self.run_dir = self.run_dir or find_run_dir(self.log_dir, besides=self._earlier)
            if self.run_dir is None:
                return []
            if self.source.events:
                root = str(Path(self.cwd, self.source.events_root)) if self.source.events_root else str(self.run_dir)
                owns = self._owners.owns if self._owners is not None else None
                self._reader = events_reader(root, self.source.library, self.started_at - 1, owns)
            else:
                self._reader = ProgressReader(progress_path(self.run_dir))
        records = self._reader.poll() if self.poll() is None or self.source.events else self._reader.drain()
        latest: dict[int, dict[str, Any]] = {}
        for record in records:
            latest[record["iteration"]] = record
        return [latest[key] for key in sorted(latest)]

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the group (islab-train checkpoints and stops its ranks), SIGKILL after ``grace_s``."""
        if self.process is None:
            return
        stop_group(self.process.pid, grace_s, lambda: self.process.poll() is not None)  # type: ignore[union-attr]
        self.finish()

    def finish(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            (self.log_dir / PGID_FILE).unlink(missing_ok=True)
        if self._log is not None:
            self._log.close()
            self._log = None

    def first_error_line(self) -> str | None:
        """What went wrong, in one line: islab-train's ``error:`` line, else rank 0's last exception."""
        lines = read_lines(self.output_log)
        for line in lines:
            if line.startswith("error:"):
                return line.strip()
        if self.run_dir is not None:
            exception = last_exception_line(read_lines(rank_log(self.run_dir, 0)))
            if exception:
                return exception
        exception = last_exception_line(lines)
        return exception or next((line.strip() for line in reversed(lines) if line.strip()), None)


def stop_group(pgid: int, grace_s: float, ended: Any) -> None:
    """SIGTERM to process group ``pgid`` (islab-train: finish the iteration, checkpoint, stop), then
    SIGKILL to it and to every process below it after ``grace_s``. islab-train starts torchrun and
    torchrun the ranks each in a session of their own, out of reach of ``killpg``: the tree is read
    from /proc first (:func:`islab.run.process_tree.process_tree`), so a SIGKILL cannot orphan them."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not ended():
        time.sleep(0.1)
    below = process_tree([pgid])
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def stop_leftovers(log_dirs: Iterable[str | Path], grace_s: float = STOP_GRACE_S) -> list[int]:
    """Stop the process group of every trial that still has one (its pgid file exists and a
    process of that group lives). Returns the groups that were found alive."""
    alive = []
    for log_dir in log_dirs:
        path = Path(log_dir, PGID_FILE)
        try:
            pgid = int(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if _group_alive(pgid) or process_tree([pgid]):
            alive.append(pgid)
            stop_group(pgid, grace_s, lambda pgid=pgid: not _group_alive(pgid) and not process_tree([pgid]))
        path.unlink(missing_ok=True)
    return alive


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
