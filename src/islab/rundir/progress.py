"""``progress.jsonl``: rank 0 appends one JSON record per training iteration; the launcher (live
view, summary, ``curves.png``) and ``play --checkpoint best`` read them back (torch-free).

A record is ``{"iteration", "max_iterations", "env_steps", "steps_per_s", "mean_return", "time_s",
"job_env_steps"}`` plus ``"losses"`` where the library gives them cheaply (see :mod:`islab.rundir`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from islab.rundir.layout import progress_path


class ProgressWriter:
    """Rank 0 appends one record per iteration; one line per write, so a reader sees whole lines
    or a torn last one (which :class:`ProgressReader` leaves for later)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = progress_path(run_dir)

    def append(self, record: Mapping[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(dict(record)) + "\n")


class ProgressReader:
    """Reads the records appended to ``progress.jsonl`` since the last call. A half-written last
    line is left for the next call; lines that are not JSON objects are skipped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        """The complete records appended since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        return [record for record in map(parse_record, lines) if record is not None]

    def drain(self) -> list[dict[str, Any]]:
        """:meth:`poll`, plus a last line without its newline if it parses (the writer is gone)."""
        records = self.poll()
        tail = parse_record(self._partial) if self._partial.strip() else None
        if tail is not None:
            self._partial = b""
            records.append(tail)
        return records


def parse_record(raw: bytes | str) -> dict[str, Any] | None:
    """One progress line as a dict, or None when it is not a record (torn, not JSON, no iteration)."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("iteration"), int) else None


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a ``progress.jsonl`` file (or of a run directory's), a torn line skipped."""
    path = Path(path)
    return ProgressReader(progress_path(path) if path.is_dir() else path).drain()
