"""Pure: the measured rows of ``islab-train fit`` -> what to try next, the recommendation, the table
and the JSON. Values in, values out; the children that measure live in :mod:`islab.fit.search`.

A row is one child: ``num_envs`` environments on one rank for a training iteration or two, its
peak memory and its env steps per second (the last iteration's: the first one pays for imports,
compilation and allocator warm-up). A row *fits* when its peak stays within ``fraction`` of the
memory one rank may use; a child that ran out of memory (an out-of-memory error, or killed by the
kernel's OOM killer) is a row too, one that does not fit.

Memory grows about linearly with ``num_envs`` (rollout storage, env state): ``m(n) = base + k n``.
Two rows at ``n/2`` and ``n`` give ``k``, so the next doubling is predicted at
``m(2n) = m(n) + 2 (m(n) - m(n/2))``; the search stops before a size predicted not to fit.

The *knee* is where throughput stops growing: the smallest ``num_envs`` whose steps/s reaches
``KNEE_SHARE`` of the best measured; beyond it more envs cost memory and buy little speed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

DEFAULT_MEMORY_FRACTION = 0.85
KNEE_SHARE = 0.9  # a size within 10% of the best steps/s is "as fast"
PLATEAU_GROWTH = 1.1  # a doubling that adds less than 10% steps/s, twice in a row: throughput has stopped growing
GIB = 1024**3


@dataclass(frozen=True)
class FitRow:
    num_envs: int
    peak_memory_bytes: int | None  # None: the child died before it could be measured
    env_steps_per_s: float | None  # None: it did not train (out of memory)
    fits: bool
    out_of_memory: bool = False
    note: str = ""  # why it does not fit, in words

    @property
    def steps_per_s_per_gb(self) -> float | None:
        if not self.env_steps_per_s or not self.peak_memory_bytes:
            return None
        return self.env_steps_per_s / (self.peak_memory_bytes / GIB)


@dataclass(frozen=True)
class Recommendation:
    num_envs: int | None
    reason: str


def budget_bytes(memory_limit_bytes: int, fraction: float) -> int:
    return int(memory_limit_bytes * fraction)


def predicted_next_peak(rows: Sequence[FitRow]) -> int | None:
    """The peak memory of the next doubling after the last row, from the last two measured rows
    (the linear model above); None with fewer than two."""
    measured = [row for row in rows if row.peak_memory_bytes is not None and not row.out_of_memory]
    if len(measured) < 2:
        return None
    previous, last = measured[-2], measured[-1]
    assert previous.peak_memory_bytes is not None and last.peak_memory_bytes is not None
    per_env = max(0.0, (last.peak_memory_bytes - previous.peak_memory_bytes) / (last.num_envs - previous.num_envs))
    return int(last.peak_memory_bytes + per_env * last.num_envs)


def peak_at(rows: Sequence[FitRow], num_envs: int) -> int | None:
    """The peak memory of ``num_envs`` envs: the measured row of that size, else the linear model
    through the two measured sizes nearest to it (None with fewer than two)."""
    measured = [row for row in rows if row.peak_memory_bytes is not None and not row.out_of_memory]
    exact = next((row.peak_memory_bytes for row in measured if row.num_envs == num_envs), None)
    if exact is not None or len(measured) < 2:
        return exact
    near = sorted(measured, key=lambda row: abs(row.num_envs - num_envs))[:2]
    (a, b) = sorted(near, key=lambda row: row.num_envs)
    assert a.peak_memory_bytes is not None and b.peak_memory_bytes is not None
    per_env = max(0.0, (b.peak_memory_bytes - a.peak_memory_bytes) / (b.num_envs - a.num_envs))
    return int(max(0.0, a.peak_memory_bytes + per_env * (num_envs - a.num_envs)))


def plateaued(rows: Sequence[FitRow]) -> bool:
    """Two doublings in a row that each added less than 10% steps/s."""
    rates = [row.env_steps_per_s for row in rows if row.fits and row.env_steps_per_s]
    if len(rates) < 3:
        return False
    return rates[-1] < rates[-2] * PLATEAU_GROWTH and rates[-2] < rates[-3] * PLATEAU_GROWTH


def stop_reason(rows: Sequence[FitRow], budget: int, max_num_envs: int) -> str | None:
    """Why the search ends after ``rows`` (None: measure the next doubling)."""
    last = rows[-1]
    if not last.fits:
        return f"{last.num_envs} envs do not fit ({last.note})"
    if last.num_envs * 2 > max_num_envs:
        return f"reached --max-num-envs {max_num_envs}"
    predicted = predicted_next_peak(rows)
    if predicted is not None and predicted > budget:
        return (f"{last.num_envs * 2} envs are predicted to need {format_bytes(predicted)}, "
                f"over the budget of {format_bytes(budget)}")  # fmt: skip
    if plateaued(rows):
        return "throughput stopped growing (two doublings each under +10% steps/s)"
    return None


def knee(rows: Sequence[FitRow]) -> FitRow | None:
    """The smallest fitting size within ``KNEE_SHARE`` of the best steps/s."""
    fitting = [row for row in rows if row.fits and row.env_steps_per_s]
    if not fitting:
        return None
    best = max(row.env_steps_per_s or 0.0 for row in fitting)
    return min((row for row in fitting if (row.env_steps_per_s or 0.0) >= KNEE_SHARE * best), key=lambda r: r.num_envs)


def recommend(rows: Sequence[FitRow], memory_limit_bytes: int, fraction: float) -> Recommendation:
    """The largest measured ``num_envs`` whose peak memory stays within the budget."""
    fitting = [row for row in rows if row.fits]
    budget = format_bytes(budget_bytes(memory_limit_bytes, fraction))
    if not fitting:
        return Recommendation(None, f"no size fits in {budget} ({fraction:.0%} of {format_bytes(memory_limit_bytes)}); "
                                    "give --min-num-envs a smaller start or more --memory-limit")  # fmt: skip
    best = max(fitting, key=lambda row: row.num_envs)
    return Recommendation(
        best.num_envs,
        f"the largest num_envs measured within {budget} ({fraction:.0%} of {format_bytes(memory_limit_bytes)}): "
        f"peak {format_bytes(best.peak_memory_bytes)}",
    )


def format_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value} B"


def format_table(rows: Sequence[FitRow]) -> list[str]:
    """One line per row: num_envs, peak memory, steps/s, steps/s per GB, fits."""
    header = f"{'num_envs':>9}  {'peak memory':>11}  {'steps/s':>10}  {'steps/s/GB':>10}  fits"
    lines = [header]
    for row in rows:
        rate = "-" if row.env_steps_per_s is None else f"{row.env_steps_per_s:,.0f}"
        per_gb = "-" if row.steps_per_s_per_gb is None else f"{row.steps_per_s_per_gb:,.0f}"
        fits = "yes" if row.fits else f"no: {row.note}"
        lines.append(f"{row.num_envs:>9}  {format_bytes(row.peak_memory_bytes):>11}  {rate:>10}  {per_gb:>10}  {fits}")
    return lines


def to_json(
    device: str,
    memory_limit_bytes: int,
    fraction: float,
    rows: Sequence[FitRow],
    stopped: str,
    extra: dict | None = None,
) -> str:
    """``{"device", "memory_limit_bytes", "memory_fraction", "rows": [...], "recommended": {"num_envs",
    "reason"}, "knee", "stopped"}``."""
    chosen = recommend(rows, memory_limit_bytes, fraction)
    knee_row = knee(rows)
    document = {
        "device": device,
        "memory_limit_bytes": memory_limit_bytes,
        "memory_fraction": fraction,
        "rows": [{**asdict(row), "steps_per_s_per_gb": row.steps_per_s_per_gb} for row in rows],
        "recommended": {"num_envs": chosen.num_envs, "reason": chosen.reason},
        "knee": None
        if knee_row is None
        else {"num_envs": knee_row.num_envs, "env_steps_per_s": knee_row.env_steps_per_s},
        "stopped": stopped,
        **(extra or {}),
    }
    return json.dumps(document, indent=2)
