"""Section 8: stock vs fused gradient/KL/normalizer sync (issue 13), side by side in one run."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from .common import CARTPOLE, LIBS, Options, median
from .training import LaunchResult, launch, launch_independent, worst_rank_share


def updates_per_iteration(label: str, num_envs: int) -> int:
    """Optimizer updates (minibatches) per training iteration of ``label``'s Cartpole config."""
    from islab.spec import sync_cost
    from islab.spec.agent_config import load_agent_config

    lib = LIBS[label][0]
    return sync_cost.updates_per_iteration(lib, load_agent_config(lib, CARTPOLE), num_envs)


@contextlib.contextmanager
def sync_mode(mode: str) -> Any:
    """``ISLAB_SYNC`` for the launches inside the block (launch() copies os.environ)."""
    previous = os.environ.get("ISLAB_SYNC")
    os.environ["ISLAB_SYNC"] = mode
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("ISLAB_SYNC", None)
        else:
            os.environ["ISLAB_SYNC"] = previous


def run_sync_section(opts: Options) -> dict[str, Any]:
    """Per library and run: 1 rank, n ranks with ``ISLAB_SYNC=stock``, n ranks with
    ``ISLAB_SYNC=fused``, and n independent 1-rank jobs (the machine ceiling), back to back."""
    n, envs = opts.scale_nproc, opts.sync_envs
    modes = ("stock", "fused")
    out: dict[str, Any] = {"libs": {}, "num_envs": envs, "nproc": n}
    for lib in opts.libs:
        warmup, measured = opts.iterations[lib]
        one: list[LaunchResult] = []
        many: dict[str, list[LaunchResult]] = {m: [] for m in modes}
        ceiling: list[float | None] = []
        for run in range(opts.train_runs):
            print(f"[bench] sync run {run + 1}/{opts.train_runs}: {lib} 1 rank, {n} ranks stock/fused", file=sys.stderr)
            one.append(launch(opts, CARTPOLE, lib, 1, envs, warmup + measured))
            for mode in modes if run % 2 == 0 else modes[::-1]:
                with sync_mode(mode):
                    many[mode].append(launch(opts, CARTPOLE, lib, n, envs, warmup + measured))
            if opts.device == "cpu":
                group = launch_independent(opts, CARTPOLE, lib, n, envs, warmup + measured)
                rates = [r.steps_per_s(warmup) for r in group]
                alone = one[-1].steps_per_s(warmup)
                ceiling.append(sum(rates) / (n * alone) if None not in rates and alone else None)
        sps1 = [r.steps_per_s(warmup) for r in one]
        row: dict[str, Any] = {
            "updates_per_iteration": updates_per_iteration(lib, envs),
            "machine_ceiling": median(ceiling),
        }
        for mode in modes:
            runs = many[mode]
            spsn = [r.steps_per_s(warmup) for r in runs]
            scaling = [a / (n * b) if a and b else None for a, b in zip(spsn, sps1, strict=True)]
            calls = [c for r in runs if (c := r.collective_calls(warmup, 0)) is not None]
            row[mode] = {
                "steps_per_s": median(r.steps_per_s(warmup) for r in runs),
                "collectives_per_iteration": median(c[0] for c in calls),
                "sync_share": median(worst_rank_share(r, warmup) for r in runs),
                "scaling": median(scaling),
                "scaling_of_ceiling": (
                    median(scaling) / median(ceiling) if median(scaling) and median(ceiling) else None
                ),
                "returncodes": [r.returncode for r in runs],
            }
        row["steps_per_s_1rank"] = median(sps1)
        out["libs"][lib] = row
    return out
