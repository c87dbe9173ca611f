"""``islab-train tasks``' rows: every announced task with what its registration says (torch-free here),
and how they print.

Tasks whose extra is missing are listed from entry-point metadata alone (no sizes, no agent
configs: those come from importing the task, which needs the extra). A task whose import fails is
listed with the reason, so one broken third-party package does not hide the others.

Printed, a task id, a package name or a path is never broken across lines: someone copies it.
The table's id and package columns do not wrap (the agent-config column may), and where the table
cannot fit the width at all, each task is one line instead. The width is the terminal's, or
``COLUMNS`` when set; written to a file or a pipe without ``COLUMNS``, nothing wraps.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import IO, Any

from islab.spec.issues import install_extra_hint
from islab.tasks import libraries_with_agent_config
from islab.tasks.registry import TASKS, missing_extra

HEADER = ("task", "package", "obs", "actions", "default num_envs", "agent configs (--lib)")
TITLE = "islab-train tasks"


def task_rows() -> list[dict[str, Any]]:
    readable = [task_id for task_id in TASKS if missing_extra(task_id) is None]
    TASKS.describe(readable)  # one child process for every package not cached yet
    rows = []
    for task_id, entry in TASKS.entries.items():
        row: dict[str, Any] = {
            "task": task_id, "package": entry.package, "observation_size": None, "action_size": None,
            "default_num_envs": None, "agent_configs": None, "extra": entry.extra or None,
            "extra_missing": missing_extra(task_id) is not None, "error": None,
            "unavailable": None,
        }  # fmt: skip
        problem = None if row["extra_missing"] else TASKS.problem(task_id)
        if problem is not None:
            row["error"] = ". ".join(problem)
        elif not row["extra_missing"]:
            info = TASKS[task_id]
            row.update(
                observation_size=info.observation_size, action_size=info.action_size,
                default_num_envs=info.default_num_envs, agent_configs=libraries_with_agent_config(task_id),
                unavailable=info.unavailable,
            )  # fmt: skip
        rows.append(row)
    return rows


def row_cells(row: dict[str, Any]) -> tuple[str, ...]:
    """One task's cells, in :data:`HEADER`'s order."""
    configs = ", ".join(row["agent_configs"] or ()) or "none"
    if row["error"] or row["unavailable"]:
        configs = "cannot be read (below)" if row["error"] else "cannot be trained (below)"
    if row["extra_missing"]:
        configs = f"needs [{row['extra']}]"
    sizes = [str(row[key]) if row[key] is not None else "-" for key in ("observation_size", "action_size",
                                                                         "default_num_envs")]  # fmt: skip
    return (row["task"], row["package"], *sizes, configs)


def task_line(row: dict[str, Any]) -> str:
    """One task on one line, for a width the table cannot fit."""
    task, package, *rest = row_cells(row)
    return f"{task}: {package}; " + "; ".join(f"{name} {value}" for name, value in zip(HEADER[2:], rest, strict=True))


def output_width(out: IO[str]) -> int | None:
    """The width to fit: a terminal's, else ``COLUMNS`` when set; None (no limit) otherwise."""
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def print_task_rows(rows: Sequence[dict[str, Any]], out: IO[str], notes: Sequence[str] = ()) -> None:
    """The table (or one line per task where it cannot fit), then each missing extra's install line,
    each task's problem and ``notes``: none of them broken inside an id, a package or a path."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=TITLE, title_justify="left")
    for column in HEADER:
        table.add_column(column, no_wrap=column != HEADER[-1])
    for row in rows:
        table.add_row(*(escape(cell) for cell in row_cells(row)))
    cells = [HEADER, *(row_cells(row) for row in rows)]
    widest = [max(len(line[index]) for line in cells) for index in range(len(HEADER))]
    rules = 3 * len(HEADER) + 1  # each cell padded by one a side, a rule between and around
    # The narrowest table that keeps ids and packages whole: the last column wrapped at its words.
    needed = sum(widest[:-1]) + max(len(word) for line in cells for word in line[-1].split()) + rules
    width = output_width(out)
    console = Console(file=out, width=width or 100_000, highlight=False, soft_wrap=True,
                      force_terminal=bool(getattr(out, "isatty", lambda: False)()))  # fmt: skip
    if width is None or needed <= width:
        console.print(table, soft_wrap=False, width=min(width or 100_000, sum(widest) + rules))
    else:
        console.print(TITLE, markup=False)
        for row in rows:
            console.print(task_line(row), markup=False)
    lines = [f"[{extra}] is not installed, so its tasks are refused. {install_extra_hint(extra)}."
             for extra in sorted({row["extra"] for row in rows if row["extra_missing"]})]  # fmt: skip
    for row in rows:
        if row["error"]:
            lines.append(f"error: {row['error']}")
        elif row["unavailable"]:
            lines.append(f"{row['task']} cannot be trained: {row['unavailable']}.")
    for line in [*lines, *notes]:
        console.print(line, markup=False)  # soft_wrap: the terminal wraps it, nothing is cut
