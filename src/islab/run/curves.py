"""``curves.png``: mean return and env steps/s per iteration, drawn from ``progress.jsonl``.

The launcher on node 0 draws it after the ranks have exited (so no rank pays for matplotlib);
matplotlib is imported only on the node that draws: the launcher, idle while its ranks start
(torchrun's agent imports torch on one core meanwhile), imports it in a thread of its own
(:func:`prepare`), so that drawing after the last rank exits costs the drawing alone (~0.2 s
instead of ~0.7 s on a 2-core machine).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def resume_points(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """The first iteration of every later process of the run (a resume or an elastic restart):
    each process reports ``time_s`` from its own start, so the clock going back marks one."""
    return [
        int(later["iteration"])
        for earlier, later in itertools.pairwise(records)
        if (later.get("time_s") or 0.0) < (earlier.get("time_s") or 0.0)
    ]


def prepare() -> None:
    """Import what :func:`write_curves` needs (matplotlib with its Agg backend, pyplot)."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit
    import matplotlib.pyplot


def write_curves(records: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """``curves.png``: mean return and env steps/s per iteration. None when there is nothing."""
    if not records:
        return None
    prepare()
    import matplotlib.pyplot as plt

    resumed_at = resume_points(records)
    # After an elastic restart the redone iterations appear twice; the later record is the kept one.
    records = list({record["iteration"]: record for record in records}.values())
    records.sort(key=lambda record: record["iteration"])
    iterations = [record["iteration"] for record in records]
    returns = [record.get("mean_return") for record in records]
    rates = [record.get("steps_per_s") for record in records]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(iterations, [math.nan if value is None else value for value in returns], color="tab:blue")
    top.set_ylabel("mean episode return")
    top.grid(alpha=0.3)
    bottom.plot(iterations, [math.nan if value is None else value for value in rates], color="tab:orange")
    bottom.set_ylabel("env steps/s (all ranks)")
    bottom.set_xlabel("iteration")
    bottom.grid(alpha=0.3)
    for number, iteration in enumerate(resumed_at):  # a resume or restart: a dashed line on both plots
        for axes in (top, bottom):
            axes.axvline(iteration - 0.5, color="gray", linestyle="--", linewidth=1,
                         label="resumed" if number == 0 and axes is top else None)  # fmt: skip
    if resumed_at:
        top.legend(loc="lower right")
    figure.suptitle(Path(path).parent.name)
    return save_figure(figure, path)


def save_figure(figure: Any, path: Path) -> Path:
    """Write a matplotlib figure as PNG atomically (temporary file + rename: a reader never sees
    half an image) and close it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(tmp, dpi=100)
    plt.close(figure)
    tmp.replace(path)
    return path
