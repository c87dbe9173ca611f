"""Test-only fault injection, read from the environment by every rank.

Fault tolerance cannot be tested without faults. These switches make one rank fail on purpose,
at a chosen moment, in the real training loop of any library; they are documented in the README
as test-only and do nothing unless set.

    ISLAB_TEST_CRASH_RANK=R          the rank whose global rank is R fails ...
    ISLAB_TEST_CRASH_AT_ITERATION=K  ... after completing iteration K (without it: at start-up)
    ISLAB_TEST_CRASH_MODE=raise|kill raise an exception (default) or SIGKILL itself
    ISLAB_TEST_CRASH_ONCE=1          fail only the first time (a marker in the run directory
                                     remembers it), so an elastic restart can succeed
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path

CRASH_RANK = "ISLAB_TEST_CRASH_RANK"
CRASH_AT_ITERATION = "ISLAB_TEST_CRASH_AT_ITERATION"
CRASH_MODE = "ISLAB_TEST_CRASH_MODE"
CRASH_ONCE = "ISLAB_TEST_CRASH_ONCE"


def maybe_inject_fault(
    rank: int, run_dir: Path, iteration: int | None, environ: Mapping[str, str] | None = None
) -> None:
    """Fail here if the switches select this rank and this moment (``iteration=None``: start-up)."""
    env = os.environ if environ is None else environ
    if env.get(CRASH_RANK) != str(rank):
        return
    at_iteration = env.get(CRASH_AT_ITERATION)
    if (None if at_iteration is None else int(at_iteration)) != iteration:
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
