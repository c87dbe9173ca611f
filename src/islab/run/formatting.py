"""Numbers and lines as the user reads them: durations, rates, returns, the ETA, the plain progress
line and the end-of-run table's rows. Pure functions over ``progress.jsonl`` records and
``summary.json``; :mod:`islab.run.console` draws them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from islab.rundir import LATEST_CHECKPOINT, SUMMARY_CHECKPOINT


def format_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_rate(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:,.0f}"


def format_return(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def eta_s(record: Mapping[str, Any]) -> float | None:
    """Remaining time at the pace of the latest iteration (env steps per iteration / its steps/s):
    the average since the start would carry the first iteration's one-off warm-up (compilation,
    allocation) into every estimate -- a 23-minute first ETA for a 2-minute run. Without a rate,
    the average pace so far."""
    iteration, total, elapsed = record.get("iteration"), record.get("max_iterations"), record.get("time_s")
    if not iteration or not total or iteration <= 0:
        return None
    env_steps, rate = record.get("env_steps"), record.get("steps_per_s")
    if env_steps and rate and rate > 0:
        return max(0.0, float(env_steps) / iteration / float(rate) * (total - iteration))
    if elapsed is None:
        return None
    return max(0.0, float(elapsed) / iteration * (total - iteration))


def plain_line(record: Mapping[str, Any]) -> str:
    """One progress report for logs: ``iteration 12/150 (8%) | 123.4k steps/s | ...``."""
    iteration, total = record.get("iteration", 0), record.get("max_iterations") or 0
    percent = f" ({100 * iteration / total:.0f}%)" if total else ""
    return (
        f"islab-train: iteration {iteration}/{total or '?'}{percent} | "
        f"{format_rate(record.get('steps_per_s'))} env steps/s | "
        f"mean return {format_return(record.get('mean_return'))} | "
        f"elapsed {format_duration(record.get('time_s'))} | ETA {format_duration(eta_s(record))}"
    )


def kept_checkpoints_row(kept: Sequence[int]) -> tuple[str, str]:
    """Which iteration checkpoints the run kept: only those can be evaluated (``islab-train eval``)."""
    which = "iterations " + ", ".join(str(iteration) for iteration in kept) if kept else f"none but {LATEST_CHECKPOINT}"
    why = "only kept ones can be evaluated: islab-train eval; --keep-checkpoints N keeps more"
    return "kept checkpoints", f"{which} ({why})"


def summary_rows(
    summary: Mapping[str, Any], run_dir: str, resume: str | None, kept: Sequence[int] | None = None
) -> list[tuple[str, str]]:
    """The end-of-run table as (label, value) rows, from rank 0's ``summary.json``; ``kept``: the
    iterations of the kept ``iter_<N>.pt`` (a row when given)."""
    wall = summary.get("wall_s")
    steps = summary.get("env_steps")
    rate = summary.get("env_steps_per_s")
    if rate is None and steps and wall:
        rate = steps / wall
    rows = [
        ("iterations", str(summary.get("iterations", "-"))),
        ("wall time", format_duration(wall)),
        ("env steps (all ranks)", f"{steps:,}" if isinstance(steps, int) else "-"),
        ("env steps/s", format_rate(rate)),
        ("final mean return", format_return(summary.get("mean_return"))),
        ("ranks", str(summary.get("world_size", "-"))),
        # the islab checkpoint, the one summary.json names (--resume, play and export read it)
        ("checkpoint", str(summary.get(SUMMARY_CHECKPOINT) or "-")),
        *([kept_checkpoints_row(kept)] if kept is not None and summary.get(SUMMARY_CHECKPOINT) else []),
        ("run directory", run_dir),
    ]
    if resume:
        # the command itself goes under the table, unwrapped, so it can be copied
        rows.append(("resume", "the command below"))
    return rows
