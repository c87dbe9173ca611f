"""``scale.png``: env steps/s against ranks beside the ideal (n x one rank), and the efficiency,
measured and predicted by the sync model (8, 16, 64 ranks, dashed). matplotlib is imported only here,
by the launcher after the runs; the PNG is written atomically (:func:`islab.run.curves.save_figure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from islab.run.curves import prepare, save_figure
from islab.scale.table import ScaleRow


def write_scale_plot(rows: Sequence[ScaleRow], predicted: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    prepare()
    import matplotlib.pyplot as plt

    ranks = [row.ranks for row in rows]
    one = rows[0].env_steps_per_s
    figure, (rate_axes, efficiency_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
    rate_axes.plot(ranks, [row.env_steps_per_s for row in rows], marker="o", label="measured")
    rate_axes.plot(ranks, [n * one for n in ranks], linestyle="--", color="gray", label="ideal: n x one rank")
    rate_axes.set_xlabel("ranks")
    rate_axes.set_ylabel("env steps/s (all ranks)")
    rate_axes.set_xticks(ranks)
    rate_axes.legend(loc="upper left")
    rate_axes.grid(alpha=0.3)
    efficiency_axes.plot(ranks, [row.efficiency for row in rows], marker="o", label="measured")
    if predicted:
        efficiency_axes.plot([ranks[-1], *(p["ranks"] for p in predicted)],
                             [rows[-1].efficiency, *(p["efficiency"] for p in predicted)],
                             marker="x", linestyle="--", label="sync model (this node's all-reduce)")  # fmt: skip
        efficiency_axes.set_xscale("log", base=2)
    shares = [row.sync_share for row in rows]
    if any(share is not None for share in shares):
        efficiency_axes.plot(ranks, [float("nan") if s is None else s for s in shares], marker=".",
                             label="sync share (model)")  # fmt: skip
    efficiency_axes.set_ylim(0, 1.05)
    efficiency_axes.set_xlabel("ranks")
    efficiency_axes.set_ylabel("efficiency = steps/s / (n x one rank)")
    efficiency_axes.legend(loc="lower left", fontsize="small")
    efficiency_axes.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    return save_figure(figure, path)
