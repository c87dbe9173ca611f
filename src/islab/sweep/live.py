"""The live table: one row per trial (trial, config, seed, status, iteration, metric).

:class:`TrialBoard` keeps the rows; Ray Tune feeds it through :class:`islab.sweep.driver`'s
callback. On a terminal the table is redrawn in place (rich's Live); otherwise (a log file, CI)
the sweep stays quiet apart from one line per trial that ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from islab.spec.text import escape
from islab.sweep.trials import Trial, config_label


@dataclass
class Row:
    trial: str
    config: str
    seed: int
    status: str = "pending"
    iteration: int | None = None
    metric: float | None = None
    node: str | None = None


class TrialBoard:
    """The trials' rows, updated from Tune's callbacks (any thread), drawn on ``out``."""

    def __init__(self, trials: Iterable[Trial], out: IO[str] | None = None, *, title: str = "") -> None:
        self.rows = {trial.id: Row(trial.id, config_label(trial.config), trial.seed) for trial in trials}
        self.out = out or sys.stderr
        self.title = title
        self.tty = self.out.isatty()
        self._lock = threading.Lock()
        self._live: Any = None

    def __enter__(self) -> TrialBoard:
        if self.tty:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self.table(), console=Console(file=self.out), refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self.table())
            self._live.__exit__(*exc)
            self._live = None

    def update(self, trial_id: str, *, config: str | None = None, seed: int | None = None, **changes: Any) -> None:
        with self._lock:
            row = self.rows.get(trial_id)
            if row is None:  # an Optuna trial: known once Optuna chose its configuration
                row = self.rows[trial_id] = Row(trial_id, config or "", seed if seed is not None else -1)
            for name, value in changes.items():
                setattr(row, name, value)
        if self._live is not None:
            self._live.update(self.table())
        elif changes.get("status") in ("finished", "failed", "stopped"):
            print(escape(self.line(row)), file=self.out, flush=True)

    def line(self, row: Row) -> str:
        metric = "-" if row.metric is None else f"{row.metric:.4g}"
        return f"islab-train sweep: trial {row.trial} ({row.config}, seed {row.seed}) {row.status}, metric {metric}"

    def table(self) -> Any:
        from rich.table import Table

        table = Table(title=self.title or None, title_justify="left")
        for column in ("trial", "config", "seed", "status", "iteration", "metric", "node"):
            table.add_column(column, no_wrap=column != "config")
        with self._lock:
            rows = list(self.rows.values())
        for row in rows:
            table.add_row(
                row.trial,
                escape(row.config),
                str(row.seed),
                row.status,
                "-" if row.iteration is None else str(row.iteration),
                "-" if row.metric is None else f"{row.metric:.4g}",
                row.node or "-",
            )
        return table
