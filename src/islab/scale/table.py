"""Pure: the runs at 1..N ranks -> efficiency, the sync share, what limits scaling, the prediction.

Weak scaling: every run gives each rank the job's own ``num_envs``, so ``n`` ranks ideally step
``n`` times as fast as one; **efficiency** = steps/s at ``n`` ranks / (``n`` x steps/s at one rank).

The **sync share** is the sync model's (:mod:`islab.spec.sync_cost`, docs/scaling.md): the fused
sync of one iteration at ``n`` ranks, priced with the latency and bandwidth the pre-flight measured on
this job's collective path, over the iteration time measured at ``n`` ranks. It is what syncing
costs when the ranks arrive together; the rest of what efficiency loses is waiting (a slow rank,
a shared core) -- which is how :func:`limit` tells the three causes apart:

* **too few envs per rank**: the sync explains the loss and most of it is per-call latency
  (``alpha`` x all-reduces), so more compute per iteration (more envs per rank) hides it;
* **sync**: the sync explains the loss and most of it is bytes (gradients / bandwidth);
* **stragglers**: the sync explains less than half of the loss: the ranks wait for the slowest.

The **prediction** at 8, 16, 64 ranks is the same model with the same measurement and the
one-rank iteration time: ``T1 / (T1 + sync(n))``. The measurement is this node's collective path
(on one node: shared memory or NVLink); ranks across nodes meet a slower fabric, so read it as an
upper bound there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from islab.spec.sync_cost import FLOAT_BYTES, SyncWork, allreduce_s, compute_for_efficiency, fused_sync_s

PREDICTED_RANKS = (8, 16, 64)
GOOD_EFFICIENCY = 0.9  # at or above this nothing needs changing
TARGET_EFFICIENCY = 0.95  # the efficiency the advice aims at (as the pre-flight's prediction does)


@dataclass(frozen=True)
class RankRun:
    """What one run at ``ranks`` ranks measured (``iteration_s``: the mean measured iteration)."""

    ranks: int
    env_steps_per_s: float
    iteration_s: float
    iterations_measured: int


def measured_run(records: Sequence[Mapping[str, Any]], ranks: int, warmup: int) -> RankRun | None:
    """A run's ``progress.jsonl`` records -> its steps/s and iteration time over the iterations after
    the first ``warmup`` (they pay for imports and the first compilations); None when none is left."""
    records = sorted(records, key=lambda record: record["iteration"])
    if len(records) <= warmup:
        return None
    start = records[warmup - 1] if warmup else {"time_s": 0.0, "env_steps": 0}
    end = records[-1]
    seconds = end["time_s"] - start["time_s"]
    count = len(records) - warmup
    if seconds <= 0:
        return None
    return RankRun(ranks, (end["env_steps"] - start["env_steps"]) / seconds, seconds / count, count)


@dataclass(frozen=True)
class Collective:
    """The pre-flight's measurement: one small all-reduce (``alpha``) and the bus bandwidth."""

    alpha_s: float
    busbw_bytes_per_s: float
    ranks: int  # the world size it was measured at

    @classmethod
    def from_report(cls, report: Mapping[str, Any] | None) -> Collective | None:
        """From ``preflight.json`` (its ``all_reduce`` rows: the smallest's median, the largest's busbw)."""
        rows = (report or {}).get("all_reduce") or []
        if not rows:
            return None
        alpha_us, busbw_gbps = rows[0].get("median_us"), rows[-1].get("busbw_gbps")
        if not alpha_us or not busbw_gbps or not math.isfinite(busbw_gbps) or busbw_gbps <= 0:
            return None
        return cls(alpha_us * 1e-6, busbw_gbps * 1e9, int(report.get("world_size") or 0))  # type: ignore[union-attr]


@dataclass(frozen=True)
class ScaleRow:
    ranks: int
    env_steps_per_s: float
    efficiency: float
    sync_share: float | None  # None: no measurement or no model (an entry point, ISLAB_SYNC=stock)
    iteration_s: float
    sync_ms: float | None


def sync_s(work: SyncWork | None, collective: Collective | None, ranks: int) -> float | None:
    if work is None or collective is None:
        return None
    return fused_sync_s(work, ranks, collective.alpha_s, collective.busbw_bytes_per_s)


def rows_of(runs: Sequence[RankRun], work: SyncWork | None, collective: Collective | None) -> list[ScaleRow]:
    """Efficiency against ``n`` x the one-rank run (the first of ``runs``) and the modelled sync share."""
    one = runs[0].env_steps_per_s
    rows = []
    for run in runs:
        sync = sync_s(work, collective, run.ranks)
        share = None if sync is None else min(1.0, sync / run.iteration_s)
        rows.append(ScaleRow(run.ranks, run.env_steps_per_s, run.env_steps_per_s / (run.ranks * one), share,
                             run.iteration_s, None if sync is None else sync * 1e3))  # fmt: skip
    return rows


def predict(work: SyncWork | None, collective: Collective | None, one_rank: RankRun) -> list[dict[str, Any]]:
    """The sync model at :data:`PREDICTED_RANKS` ranks with this node's measured all-reduce."""
    predicted = []
    for ranks in PREDICTED_RANKS:
        sync = sync_s(work, collective, ranks)
        if sync is None:
            return []
        efficiency = one_rank.iteration_s / (one_rank.iteration_s + sync)
        predicted.append({"ranks": ranks, "sync_ms": round(sync * 1e3, 3), "efficiency": round(efficiency, 3),
                          "env_steps_per_s": round(efficiency * ranks * one_rank.env_steps_per_s, 1)})  # fmt: skip
    return predicted


@dataclass(frozen=True)
class Limit:
    kind: str  # none, too few envs per rank, sync, stragglers, unknown
    line: str


def limit(
    rows: Sequence[ScaleRow], work: SyncWork | None, collective: Collective | None, *, num_envs: int,
    cpu_cores: int | None = None,
) -> Limit:  # fmt: skip
    """What limits scaling at the largest rank count, and what to change, in one line."""
    last, one = rows[-1], rows[0]
    n = last.ranks
    if n == 1:
        return Limit("unknown", "one rank: nothing to compare; give --nproc 2 or more")
    if last.efficiency >= GOOD_EFFICIENCY:
        return Limit("none", f"nothing limits scaling at {n} ranks (efficiency {last.efficiency:.2f})")
    loss = 1 - last.efficiency
    crowded = cpu_cores is not None and n > cpu_cores
    if last.sync_share is None or last.sync_ms is None or work is None or collective is None:
        return Limit("unknown", f"efficiency {last.efficiency:.2f} at {n} ranks; no sync measurement to tell why "
                     "(run with the pre-flight on and fused sync to have one)")  # fmt: skip
    if last.sync_share < loss / 2 or crowded:
        cores = f"{n} ranks on {cpu_cores} cores; " if crowded else ""
        return Limit("stragglers", f"stragglers: the sync model explains {last.sync_share:.0%} of the iteration but "
                     f"{loss:.0%} is lost, so the ranks wait for the slowest ({cores}other load, uneven envs): give "
                     "each rank a core or GPU of its own, fewer ranks per node, or check what else runs")  # fmt: skip
    latency_s = sum(count for count, _ in work.fused()) * collective.alpha_s
    sync = last.sync_ms / 1e3
    needed_s = compute_for_efficiency(sync, TARGET_EFFICIENCY)
    compute_s = one.iteration_s
    envs = 2 ** math.ceil(math.log2(max(1.0, num_envs * needed_s / compute_s)))
    if latency_s >= sync / 2:
        return Limit("too few envs per rank", f"too few envs per rank: an iteration computes {compute_s * 1e3:.0f} "
                     f"ms against {last.sync_ms:.1f} ms of sync, mostly per-call latency; give each rank ~{envs} envs "
                     f"(--num-envs {envs}) so an iteration computes >= {needed_s * 1e3:.0f} ms")  # fmt: skip
    bytes_s = sync - latency_s
    grad_mb = work.grad_params * FLOAT_BYTES / 1e6
    one_update = allreduce_s(work.grad_params * FLOAT_BYTES, n, 0.0, collective.busbw_bytes_per_s) * 1e3
    return Limit("sync", f"sync: {bytes_s * 1e3:.1f} ms per iteration moves {work.updates} x {grad_mb:.2g} MB of "
                 f"gradients ({one_update:.2g} ms each at {collective.busbw_bytes_per_s / 1e9:.2g} GB/s): fewer "
                 "updates per iteration (minibatches x epochs), a faster interconnect, or more envs per rank "
                 f"(--num-envs {envs})")  # fmt: skip


HEADER = ("ranks", "env steps/s", "ideal (n x 1 rank)", "efficiency", "iteration", "sync (model)", "sync share")


def format_table(rows: Sequence[ScaleRow]) -> list[str]:
    """The rows as an aligned text table (also the Markdown file's body)."""
    one = rows[0].env_steps_per_s
    cells = [
        (
            str(row.ranks),
            f"{row.env_steps_per_s:,.0f}",
            f"{row.ranks * one:,.0f}",
            f"{row.efficiency:.2f}",
            f"{row.iteration_s * 1e3:.0f} ms",
            "-" if row.sync_ms is None else f"{row.sync_ms:.2f} ms",
            "-" if row.sync_share is None else f"{row.sync_share:.1%}",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (HEADER, *cells)) for i in range(len(HEADER))]
    return ["  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in (HEADER, *cells)]


def prediction_lines(predicted: Sequence[Mapping[str, Any]]) -> list[str]:
    return [f"  {p['ranks']:>3} ranks: sync {p['sync_ms']:.2f} ms per iteration, efficiency {p['efficiency']:.2f}, "
            f"~{p['env_steps_per_s']:,.0f} env steps/s" for p in predicted]  # fmt: skip


def to_json(
    rows: Sequence[ScaleRow], found: Limit, predicted: Sequence[Mapping[str, Any]], collective: Collective | None,
    extra: Mapping[str, Any],
) -> str:  # fmt: skip
    """``{"rows": [{"ranks", "env_steps_per_s", "efficiency", "sync_share", ...}], "limit", "prediction", ...}``."""
    document = {
        "rows": [
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(row).items()} for row in rows
        ],
        "limit": found.kind,
        "limit_line": found.line,
        "prediction": list(predicted),
        "all_reduce": None if collective is None else {
            "alpha_us": round(collective.alpha_s * 1e6, 2), "busbw_gbps": round(collective.busbw_bytes_per_s / 1e9, 4),
            "measured_at_ranks": collective.ranks,
        },
        **extra,
    }  # fmt: skip
    return json.dumps(document, indent=2)
