"""The process tree below islab-train, read from ``/proc`` (Linux; supervision is Linux-only).

torchrun starts every rank in a session of its own, out of reach of ``killpg(torchrun)``: whoever
must reach the ranks (signals, the hang watch, a sweep stopping its trials) walks the tree down from
the processes it started. A process is named by its pid and its start time together, so a later
process that reused a pid is never taken for the one that was seen.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def process_tree(roots: Iterable[int], proc: Path = Path("/proc")) -> dict[int, int]:
    """Every descendant of ``roots`` (not the roots themselves) as ``{pid: start time}``, read from
    ``/proc/<pid>/stat``. The start time tells a live process from a later one that reused its pid.
    Empty where there is no ``/proc`` (supervision is Linux-only anyway).

    Walked down from the roots through ``/proc/<pid>/task/<tid>/children`` (a handful of reads for a
    job, where scanning every process of a shared machine cost the launcher ~10-30 ms of CPU four
    times a second, taken from the ranks); the full scan where a kernel has no children files."""
    walked = _walk_children(roots, proc)
    if walked is not None:
        return walked
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    try:
        entries = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return {}
    for entry in entries:
        stat = read_stat(int(entry), proc)
        if stat is not None:
            ppid, start = stat
            children.setdefault(ppid, []).append(int(entry))
            started[int(entry)] = start
    found: dict[int, int] = {}
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found[child] = started[child]
                todo.append(child)
    return found


def _walk_children(roots: Iterable[int], proc: Path) -> dict[int, int] | None:
    """:func:`process_tree` from the children files; None when a live process has none to read."""
    found: dict[int, int] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(proc / str(pid) / "task")
        except OSError:
            continue  # gone meanwhile
        for tid in tasks:
            try:
                listed = (proc / str(pid) / "task" / tid / "children").read_text().split()
            except FileNotFoundError:
                if (proc / str(pid) / "task" / tid).is_dir():
                    return None  # no children files on this kernel (CONFIG_PROC_CHILDREN)
                continue
            except OSError:
                continue
            for child in map(int, listed):
                stat = read_stat(child, proc)
                if child not in found and stat is not None:
                    found[child] = stat[1]
                    todo.append(child)
    return found


def parent_pid(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The parent of a live process, None when it is gone."""
    stat = read_stat(pid, proc)
    return stat[0] if stat is not None else None


def read_stat(pid: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live, non-zombie process, else None."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may contain spaces and parentheses, so split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in {"Z", "X"}:
        return None
    return int(fields[1]), int(fields[19])
