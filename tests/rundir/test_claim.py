"""A new directory is claimed atomically (islab.rundir.claim_new_dir): processes that race for one
name each end up with a directory of their own, the first with the name itself."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from islab.rundir import claim_new_dir


def test_a_taken_name_gets_the_next_free_suffix(tmp_path):
    planned = tmp_path / "logs" / "rsl_rl" / "Task" / "2026-01-01_12-00-00"
    assert claim_new_dir(planned) == planned and planned.is_dir()  # parents made as needed
    assert claim_new_dir(planned) == planned.with_name("2026-01-01_12-00-00-2")
    (planned.parent / "2026-01-01_12-00-00-3").mkdir()  # a name is skipped whoever made it
    assert claim_new_dir(planned) == planned.with_name("2026-01-01_12-00-00-4")


def _claim(planned: str, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    start.wait()
    out.put(str(claim_new_dir(planned)))


def test_processes_racing_for_one_name_each_get_their_own(tmp_path):
    planned = str(tmp_path / "run")
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    racers = [context.Process(target=_claim, args=(planned, start, out)) for _ in range(6)]
    for racer in racers:
        racer.start()
    start.set()  # all at once
    claimed = sorted(out.get(timeout=30) for _ in racers)
    for racer in racers:
        racer.join(timeout=30)
    assert claimed == sorted([planned, *(f"{planned}-{n}" for n in range(2, 7))])
    assert sorted(path.name for path in Path(tmp_path).iterdir()) == sorted(Path(name).name for name in claimed)
