"""What the user sees while a run trains, and when it ends.

The launcher owns the console; the ranks write to their log files (``<run_dir>/logs/rank_<R>.log``)
and rank 0 appends one JSON line per iteration to ``<run_dir>/progress.jsonl`` (read through
:mod:`islab.rundir`, which names every file of the run directory). This module turns them into:

* on a terminal, a **live display** (Rich ``Live``): iteration / max with a bar, total env steps/s
  of all ranks, mean episode return, elapsed time and ETA; lines from the ranks that are shown
  (see :class:`ConsolePolicy`) scroll above it;
* elsewhere (CI logs, ``| tee``), a **plain line** every ``interval_s`` seconds when there is
  news, and the last one at the end -- no escape codes, one line per report;
* at the end, a **summary table** from ``summary.json`` (wall time, env steps, steps/s, final mean
  return, checkpoint, run directory, the command that resumes) and **curves.png**
  (:mod:`islab.run.curves`). The launcher on node 0 writes it, from rank 0's file, after the
  ranks have exited -- so no rank pays for matplotlib.

Which lines pass is decided by pure functions (:func:`route_line`, :class:`ConsolePolicy`); the
numbers are worded by :mod:`islab.run.formatting`. Rich and matplotlib are imported only when
something is drawn.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

from islab.run.curves import prepare, write_curves
from islab.run.formatting import eta_s, format_duration, format_rate, format_return, plain_line, summary_rows
from islab.rundir import (
    CURVES_FILE,
    ProgressReader,
    curves_path,
    history_checkpoints,
    progress_path,
    rank_log,
    read_progress,
    read_summary,
)

DEFAULT_PLAIN_INTERVAL_S = 10.0
# torchrun --tee prefixes every line of a worker with "[<role><local_rank>]:"
_TORCHRUN_LINE = re.compile(r"^\[default(\d+)\]:(.*)$", re.DOTALL)

Stream = Literal["out", "err"]
# ANSI/VT100 escape sequences (colours, cursor moves): CSI ... final byte, or ESC + one byte.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# A log record below WARNING, as Python logging formats it in the libraries: "[skrl:INFO] ...",
# "INFO:root:...", "2026-... - INFO - ..." (checked after the colour codes are gone).
_QUIET_RECORD = re.compile(r"^\s*(\[[\w.]+:(INFO|DEBUG)\]|(INFO|DEBUG):|\S.*? - (INFO|DEBUG) - )")
# torch.distributed's excepthook (set by init_process_group) writes an uncaught exception with every
# non-empty line prefixed "[rank<R>]: ", which marks the whole block, message lines included.
_EXCEPTHOOK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
_TRACEBACK_START = "Traceback (most recent call last)"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _is_tty(sink: IO[str]) -> bool:
    isatty = getattr(sink, "isatty", None)
    return bool(isatty and isatty())


# ----------------------------------------------------------------------------------------------
# Which lines reach the console
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsolePolicy:
    """Default: the launcher's own lines, and rank 0's stderr (warnings; a traceback as one line, see
    :class:`TracebackCondenser`); every rank's full output is in its log file. ``all_ranks``: every
    line of every rank, prefixed, tracebacks whole."""

    all_ranks: bool = False

    def shows(self, rank: int | None, stream: Stream, text: str = "") -> bool:
        """Whether a line reaches the console. By default a rank's INFO/DEBUG log records are
        not shown (README: only warnings and errors), even though logging writes them to stderr."""
        if rank is None or self.all_ranks:
            return True
        return rank == 0 and stream == "err" and not _QUIET_RECORD.match(strip_ansi(text))


def route_line(line: str, first_rank: int) -> tuple[int | None, str]:
    """A line from torchrun's output -> (global rank or None for torchrun's own lines, text).

    ``first_rank`` is the global rank of this node's local rank 0 (``node_rank * nproc``)."""
    match = _TORCHRUN_LINE.match(line)
    if match is None:
        return None, line
    return first_rank + int(match.group(1)), match.group(2)


class TracebackCondenser:
    """A rank's Python tracebacks, one line each on the console (issue 23 item 13).

    A rank that raises prints 10-40 lines of frames; the supervisor's error line at the end names the
    failed rank, its exception and its log. So by default a traceback is shown as its exception and
    the log that holds the rest -- ``ValueError: Invalid learning rate: -1 (traceback in
    <run_dir>/logs/rank_0.log)`` -- which also keeps a traceback that does not end the rank (a
    library's caught and printed error) in sight. The rank logs keep every line. Fed every line of
    one output stream in order, per rank."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        # rank -> (past the exception line, the block carries torch's excepthook prefix); absent: not in one
        self._inside: dict[int, tuple[bool, bool]] = {}

    def condense(self, rank: int, text: str) -> str | None:
        """What the console shows for this line of ``rank``: the line itself, nothing (a line of a
        traceback), or, for a traceback's exception line, the one line naming it and the log."""
        plain = strip_ansi(text).rstrip("\n")
        prefixed = bool(_EXCEPTHOOK_PREFIX.match(plain))
        body = _EXCEPTHOOK_PREFIX.sub("", plain, count=1)
        if body.startswith(_TRACEBACK_START):
            self._inside[rank] = (False, prefixed)
            return None
        if rank not in self._inside:
            return text
        raised, block_prefixed = self._inside[rank]
        indented = not body.strip() or body[0].isspace()  # a frame, a source line, a blank line
        # torch's block is exactly its prefixed lines; a plain one is the frames, the exception line,
        # and after it indented lines and a chained exception's link line ("During handling ...").
        part = (
            (prefixed or not body.strip()) if block_prefixed else (indented or not raised or body.startswith(_CHAINED))
        )
        if not part:  # the rank's ordinary output again
            del self._inside[rank]
            return text
        if not raised and not indented:  # the first unindented line after the frames: the exception
            self._inside[rank] = (True, block_prefixed)
            return f"{body.strip()} (traceback in {rank_log(self.run_dir, rank)})"
        return None


def rank_prefix(rank: int | None) -> str:
    return "" if rank is None else f"[rank {rank}] "


def resume_command(run_dir: str) -> str:
    """The command that continues this run: the run directory alone (its stored spec holds the
    rest, see :mod:`islab.resolve.resumed`), absolute so that it works from any directory."""
    return shlex.join(["islab-train", "--resume", os.path.abspath(run_dir)])


# ----------------------------------------------------------------------------------------------
# Drawing
# ----------------------------------------------------------------------------------------------


def _live_renderable(record: Mapping[str, Any] | None, started: float, note: str, waiting: str | None = None) -> Any:
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    title = Text.from_markup(f"[bold]islab-train[/bold] {note}")
    elapsed = time.monotonic() - started
    if record is None:
        if waiting:  # a user's script between event flushes: elapsed time and rank 0's last line
            return Group(title, Text(f"{format_duration(elapsed)} elapsed · rank 0: {waiting}", style="dim"))
        return Group(title, Text.from_markup(f"[dim]waiting for the first iteration… {format_duration(elapsed)}[/dim]"))
    iteration, total = record.get("iteration", 0), record.get("max_iterations") or 0
    percent = f" ({100 * iteration / total:.0f}%)" if total else ""
    head = Table.grid(padding=(0, 1))
    head.add_column(no_wrap=True)
    head.add_column(no_wrap=True)
    head.add_row(
        ProgressBar(total=float(total or 1), completed=float(iteration), width=40),
        Text.from_markup(f"[bold]iteration[/bold] {iteration}/{total or '?'}{percent}"),
    )
    stats = Text.from_markup(
        f"[bold]env steps/s[/bold] {format_rate(record.get('steps_per_s'))}  "
        f"[bold]mean return[/bold] {format_return(record.get('mean_return'))}  "
        f"[bold]elapsed[/bold] {format_duration(record.get('time_s'))}  "
        f"[bold]ETA[/bold] {format_duration(eta_s(record))}"
    )
    return Group(title, head, stats)


class RunView:
    """The console while a run trains. ``emit`` is safe to call from the output-pump threads;
    ``tick`` is called by the supervisor's poll loop; ``close`` ends the live display."""

    def __init__(
        self,
        run_dir: str,
        out: IO[str],
        *,
        live: bool,
        progress: bool = True,
        note: str = "",
        interval_s: float = DEFAULT_PLAIN_INTERVAL_S,
        reader: Any = None,
        last_line: Callable[[], str | None] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.out = out
        self.progress = progress
        self.note = note
        self.interval_s = interval_s
        # progress.jsonl (our worker), or a user entry point's TensorBoard events (same records)
        self.reader = reader if reader is not None else ProgressReader(progress_path(run_dir))
        # rank 0's last log line: shown with the elapsed time while no iteration has been reported
        self.last_line = last_line
        self.latest: dict[str, Any] | None = None
        # A run resumed in place: what progress.jsonl already holds is history (for the curves), not
        # this launch's progress -- its last record must not be shown as the first progress line.
        self.records: list[dict[str, Any]] = self.reader.poll() if reader is None and progress else []
        self._printed: int | None = None
        self._last_print = -math.inf
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._live: Any = None
        self._closed = False
        if progress:  # the end of the run draws curves.png: its imports are done while the ranks start
            threading.Thread(target=_prepare_finish, name="islab-prepare-finish", daemon=True).start()
        if live and progress:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=out, force_terminal=True, highlight=False)
            self._live = Live(
                _live_renderable(None, self._started, note), console=console, refresh_per_second=4, transient=False
            )
            self._live.start()

    def emit(self, text: str, sink: IO[str]) -> None:
        """Show one line of output (above the live display when there is one)."""
        if self._live is None and not _is_tty(sink):
            text = strip_ansi(text)  # plain (non-TTY) output: no escape codes in logs and pipes
        with self._lock:
            if self._live is not None:
                self._live.console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
            else:
                sink.write(text if text.endswith("\n") else text + "\n")
                sink.flush()

    def tick(self, *, final: bool = False) -> None:
        if not self.progress or self._closed:
            return
        new = self.reader.poll()
        if new:
            self.records.extend(new)
            self.latest = new[-1]
        with self._lock:
            waiting = self.last_line() if self.last_line is not None and self.latest is None else None
            if self._live is not None:
                self._live.update(_live_renderable(self.latest, self._started, self.note, waiting))
                return
            now = time.monotonic()
            due = final or now - self._last_print >= self.interval_s
            if waiting and due and not final:
                elapsed = format_duration(now - self._started)
                self.out.write(f"islab-train: {elapsed} elapsed · rank 0: {waiting}\n")
                self.out.flush()
                self._last_print = now
            if self.latest is not None and due and self.latest.get("iteration") != self._printed:
                self.out.write(plain_line(self.latest) + "\n")
                self.out.flush()
                self._printed = self.latest.get("iteration")
                self._last_print = now

    def close(self) -> None:
        if self._closed:
            return
        self.tick(final=True)
        self._closed = True
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None


def _prepare_finish() -> None:
    """What :func:`finish` imports, imported ahead (a failure here is :func:`finish`'s to report)."""
    with contextlib.suppress(Exception):
        prepare()
        import rich.table  # noqa: F401


def render_summary(rows: Iterable[tuple[str, str]], out: IO[str], *, tty: bool) -> None:
    """The end-of-run table. On a terminal it fits the terminal's width (a long path folds); written
    without one (CI logs, a file) it is as wide as its values, so a path is never split."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, force_terminal=tty, no_color=not tty, width=None if tty else 100_000, highlight=False)
    table = Table(title="islab-train: run finished", title_justify="left", show_header=False)
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold", no_wrap=not tty)
    for label, value in rows:
        table.add_row(label, value)
    console.print(table)


def finish(run_dir: str, out: IO[str], *, tty: bool, resume: str | None, records: Sequence[Mapping[str, Any]]) -> None:
    """End of a successful run on node 0: curves.png and the summary table."""
    records = list(records) or read_progress(progress_path(run_dir))
    curves = None
    try:
        curves = write_curves(records, curves_path(run_dir))
    except Exception as exc:  # a plot must never turn a finished run into a failure
        out.write(f"islab-train: could not draw {CURVES_FILE}: {exc}\n")
    summary = read_summary(run_dir)
    if summary is None and records:  # a user's script: the summary comes from its TensorBoard events
        last = records[-1]
        rows = [("iterations", str(last.get("iteration"))), ("mean return", format_return(last.get("mean_return"))),
                ("wall time", format_duration(last.get("time_s"))), ("run dir", run_dir)]  # fmt: skip
        if curves is not None:
            rows.append(("curves", str(curves)))
        render_summary(rows, out, tty=tty)
        return
    if summary is None:  # a user's script that logs no TensorBoard scalars: a success all the same
        out.write(
            f"islab-train: finished (every rank exited 0). Run directory: {run_dir} -- the entry point "
            "reported no progress islab can read (TensorBoard scalars), so there is no summary table.\n"
        )
        return
    rows = summary_rows(summary, run_dir, resume, kept=list(history_checkpoints(run_dir)))
    if curves is not None:
        rows.insert(-1 if resume else len(rows), ("curves", str(curves)))
    render_summary(rows, out, tty=tty)
    if resume:
        out.write(f"To resume this run:\n  {resume}\n")
        out.flush()
