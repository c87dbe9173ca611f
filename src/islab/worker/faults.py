"""Test-only fault injection, read from the environment by every rank.

Fault tolerance cannot be tested without faults. These switches make one rank fail on purpose,
at a chosen moment, in the real training loop of any library; they are documented in the README
as test-only and do nothing unless set.

    ISLAB_TEST_CRASH_RANK=R          the rank whose global rank is R fails ...
    ISLAB_TEST_CRASH_AT_ITERATION=K  ... after completing iteration K (without it: at start-up)
    ISLAB_TEST_CRASH_MODE=raise|kill raise an exception (default) or SIGKILL itself
    ISLAB_TEST_CRASH_ONCE=1          fail only the first time (a marker in the run directory
                                     remembers it), so an elastic restart can succeed
    ISLAB_TEST_HANG_RANK=R           the rank whose global rank is R sleeps forever ...
    ISLAB_TEST_HANG_AT_ITERATION=K   ... after completing iteration K (without it: at start-up),
                                     for the launcher's hang detection (--hang-timeout)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

CRASH_RANK = "ISLAB_TEST_CRASH_RANK"
CRASH_AT_ITERATION = "ISLAB_TEST_CRASH_AT_ITERATION"
CRASH_MODE = "ISLAB_TEST_CRASH_MODE"
CRASH_ONCE = "ISLAB_TEST_CRASH_ONCE"
HANG_RANK = "ISLAB_TEST_HANG_RANK"
HANG_AT_ITERATION = "ISLAB_TEST_HANG_AT_ITERATION"


def _selected(
    env: Mapping[str, str], rank_switch: str, iteration_switch: str, rank: int, iteration: int | None
) -> bool:
    """Do the switches name this rank and this moment (``iteration=None``: start-up)?"""
    if env.get(rank_switch) != str(rank):
        return False
    at_iteration = env.get(iteration_switch)
    return (None if at_iteration is None else int(at_iteration)) == iteration


def maybe_inject_fault(
    rank: int, run_dir: Path, iteration: int | None, environ: Mapping[str, str] | None = None
) -> None:
    """Fail here if the switches select this rank and this moment (``iteration=None``: start-up)."""
    env = os.environ if environ is None else environ
    maybe_hang(rank, iteration, env)
    if not _selected(env, CRASH_RANK, CRASH_AT_ITERATION, rank, iteration):
        return
    marker = Path(run_dir) / f".fault-injected-rank{rank}"
    if env.get(CRASH_ONCE) == "1":
        if marker.exists():
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    moment = "at start-up" if iteration is None else f"after iteration {iteration}"
    print(f"[islab] test fault injection: rank {rank} fails {moment}", flush=True)
    if env.get(CRASH_MODE, "raise") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"test fault injection: {CRASH_RANK}={rank} asked this rank to fail {moment}")


def maybe_hang(rank: int, iteration: int | None, environ: Mapping[str, str] | None = None) -> None:
    """Sleep forever here if the hang switches select this rank and this moment: a rank that stops
    making progress without failing, which only the launcher's hang watch can end."""
    env = os.environ if environ is None else environ
    if not _selected(env, HANG_RANK, HANG_AT_ITERATION, rank, iteration):
        return
    moment = "at start-up" if iteration is None else f"after iteration {iteration}"
    print(f"[islab] test fault injection: rank {rank} hangs {moment}", flush=True)
    while True:
        time.sleep(3600)
