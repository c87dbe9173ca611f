"""``curves.png``: the metric against env steps, one line per configuration (mean over its seeds)
with a band from the lowest to the highest seed, so a lucky seed cannot pass for a good setting.

Each trial record holds its curve (``[[env_steps, value], ...]`` per iteration). The seeds of a
configuration are aligned by iteration (the same configuration takes the same env steps per
iteration) up to the shortest of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from islab.run.curves import save_figure
from islab.sweep.trials import config_label


def config_band(curves: list[list[list[float]]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """(env steps, mean, low, high) over the seeds' curves, aligned by iteration."""
    curves = [curve for curve in curves if curve]
    if not curves:
        return [], [], [], []
    length = min(len(curve) for curve in curves)
    steps, mean, low, high = [], [], [], []
    for index in range(length):
        values = [curve[index][1] for curve in curves]
        xs = [curve[index][0] for curve in curves if curve[index][0] is not None]
        steps.append(sum(xs) / len(xs) if xs else float(index + 1))
        mean.append(sum(values) / len(values))
        low.append(min(values))
        high.append(max(values))
    return steps, mean, low, high


def write_sweep_curves(result: Mapping[str, Any], path: Path, *, metric: str) -> Path | None:
    trials = {trial["id"]: trial for trial in result["trials"]}
    if not any(trial.get("curve") for trial in trials.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5.5))
    for rank, config in enumerate(result["configs"], start=1):
        curves = [trials[ident].get("curve") or [] for ident in config["trials"]]
        steps, mean, low, high = config_band(curves)
        if not steps:
            continue
        label = f"#{rank} {config_label(config['config'])} ({len([c for c in curves if c])} seeds)"
        (line,) = axes.plot(steps, mean, label=label)
        axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xlabel("env steps")
    axes.set_ylabel(f"{metric} (mean over seeds; band: min-max)")
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    figure.suptitle(Path(path).parent.name)
    figure.tight_layout()
    return save_figure(figure, path)
