"""The pre-flight's prediction: what synchronising costs this job per iteration -- pure, torch-free.

The probe measured this job's own collective path: the median of a 4-byte all-reduce (``alpha``,
what one collective costs however small) and the bus bandwidth of the largest one. docs/scaling.md's
model (:mod:`islab.spec.sync_cost`, its one home) turns them into the sync time of one iteration of
islab's worker with fused sync: ``updates + 2`` all-reduces, each ``t(S, n) = alpha + 2 (n - 1) / n
x S / busbw`` with ``S`` the policy's gradients (estimated from the agent config's layer sizes).

The compute time ``T`` of an iteration is not known before training, so the line does not guess
it: it says how much compute an iteration needs for the job to reach an efficiency of 0.95
(``T / (T + sync)``, weak scaling: every rank keeps its envs), i.e. ``0.95 x n`` times one rank's
throughput. The measured ``alpha`` comes from back-to-back calls with the ranks aligned; in training
a rank also waits for the slowest one, so the sync is at least this (the ``nccl`` model of
docs/scaling.md, a lower bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from islab.spec.sync_cost import SyncWork, compute_for_efficiency, fused_sync_s

EFFICIENCY = 0.95
ESTIMATED_FROM = (
    "the agent config's layer sizes and the task's observation and action sizes (MLP weights, biases, action std)"
)


def predict(work: SyncWork, report: Mapping[str, Any]) -> dict[str, Any] | None:
    """``preflight.json``'s ``prediction``, or None when the report has no usable measurement."""
    rows = report.get("all_reduce") or []
    ranks = int(report.get("world_size") or 0)
    if not rows or ranks < 2:
        return None
    alpha_us, busbw_gbps = rows[0].get("median_us"), rows[-1].get("busbw_gbps")
    if not alpha_us or not busbw_gbps or not math.isfinite(busbw_gbps) or busbw_gbps <= 0:
        return None
    sync_s = fused_sync_s(work, ranks, alpha_us * 1e-6, busbw_gbps * 1e9)
    return {
        "library": work.lib,
        "sync": "fused",
        "updates_per_iteration": work.updates,
        "all_reduces_per_iteration": sum(count for count, _ in work.fused()),
        "gradient_params": work.grad_params,
        "gradient_params_estimated_from": ESTIMATED_FROM,
        "all_reduce_us": alpha_us,
        "busbw_gbps": busbw_gbps,
        "ranks": ranks,
        "sync_ms": round(sync_s * 1e3, 3),
        "efficiency": EFFICIENCY,
        "speedup": round(EFFICIENCY * ranks, 2),
        "compute_ms_needed": round(compute_for_efficiency(sync_s, EFFICIENCY) * 1e3, 1),
    }


def _ms(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def _kb(params: int) -> str:
    return f"{params * 4 / 1024:.3g} KB"


def prediction_line(prediction: Mapping[str, Any]) -> str:
    """What the prediction means for the user, in their words: ``pre-flight: predicted: syncing the
    ranks costs >= 7.9 ms per training iteration (22 all-reduces of 9.76 KB of gradients: 20 updates +
    2); 2 ranks train 1.9x as fast as one if an iteration computes for >= 150 ms, so give each rank
    enough envs (--num-envs) for that``. The model's inputs (latency, bandwidth, library, sync mode)
    are in ``preflight.json``'s ``prediction``."""
    p = prediction
    extra = p["all_reduces_per_iteration"] - p["updates_per_iteration"]
    return (
        f"pre-flight: predicted: syncing the ranks costs >= {_ms(p['sync_ms'])} ms per training iteration "
        f"({p['all_reduces_per_iteration']} all-reduces of {_kb(p['gradient_params'])} of gradients: "
        f"{p['updates_per_iteration']} updates + {extra}); {p['ranks']} ranks train {p['speedup']:g}x as fast as "
        f"one if an iteration computes for >= {_ms(p['compute_ms_needed'])} ms, so give each rank enough envs "
        "(--num-envs) for that"
    )
