"""What ``islab-train eval`` shows: its progress lines, the final table and ``eval.png`` (torch-free).

``eval.png`` has two panels against training iteration: on top the evaluated mean return of each
checkpoint (deterministic policy; the band is one standard deviation over episodes) beside the mean
return training recorded (stochastic actions, a window of recent episodes: ``progress.jsonl``), and
below the success rate (the task's own measure; a task without one says so). The best checkpoint
is marked on both. Saved atomically as ``curves.png`` is (:func:`islab.run.curves.save_figure`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from islab import rundir
from islab.run.curves import prepare, save_figure


def _library(spec: Mapping[str, Any]) -> str:
    framework = spec.get("ml_framework") or "torch"
    return str(spec["lib"]) if framework == "torch" else f"{spec['lib']} ({framework})"


def starting_line(spec: Mapping[str, Any], checkpoints: int, episodes: int, processes: int, device: str) -> str:
    return (f"islab-train eval: {_library(spec)} {spec['task']}: {checkpoints} checkpoint(s) x {episodes} episodes, "
            f"deterministic policy, {processes} process(es) on {device}, one checkpoint each at a time")  # fmt: skip


def _success(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


def progress_line(answer: Mapping[str, Any], done: int, total: int) -> str:
    if "error" in answer:
        return f"islab-train eval: [{done}/{total}] {answer['checkpoint']}: not evaluated"
    success = _success(answer["success_rate"])
    return (
        f"islab-train eval: [{done}/{total}] iteration {answer['iteration']}: mean return "
        f"{answer['mean_return']:.2f} (std {answer['std_return']:.2f}), success {success}, "
        f"length {answer['episode_length']:.1f} (process {answer['worker']}, {answer['wall_s']:.1f} s)"
    )


def render(evaluation: Mapping[str, Any], plot: Path | None) -> str:
    """The table of every evaluated checkpoint, the best marked, and what was written."""
    best, entries = evaluation["best"], evaluation[rundir.EVALUATED_KEY]
    lines = [
        f"{_library(evaluation)} {evaluation['task']}: {len(entries)} checkpoint(s), "
        f"{evaluation['episodes']} episodes each, deterministic policy, {evaluation['num_envs']} envs, "
        f"{evaluation['processes']} process(es) on {evaluation['device']}",
        f"  {'iteration':>9}  {'mean return':>11}  {'std':>8}  {'success':>7}  {'length':>7}",
    ]
    for entry in entries:
        mark = "  <- best" if entry == best else ""
        lines.append(f"  {entry['iteration']:>9}  {entry['mean_return']:>11.2f}  {entry['std_return']:>8.2f}  "
                     f"{_success(entry['success_rate']):>7}  {entry['episode_length']:>7.1f}{mark}")  # fmt: skip
    if evaluation.get("success_measure"):
        lines.append(f"success: {evaluation['success_measure']}")
    run_dir = Path(evaluation["run_dir"])
    written = [str(rundir.eval_path(run_dir))] + ([str(plot)] if plot is not None else [])
    lines.append(f"written: {', '.join(written)}")
    lines.append(f"islab-train play {run_dir} --checkpoint best  now plays iteration {best['iteration']} "
                 f"({best['checkpoint']})")  # fmt: skip
    return "\n".join(lines)


def draw(evaluation: Mapping[str, Any], training: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """``eval.png``; None when matplotlib cannot draw (eval.json is written anyway)."""
    try:
        prepare()
    except ImportError:
        return None
    import matplotlib.pyplot as plt

    entries = evaluation[rundir.EVALUATED_KEY]
    best = evaluation["best"]
    iterations = [entry["iteration"] for entry in entries]
    means = [entry["mean_return"] for entry in entries]
    stds = [entry["std_return"] for entry in entries]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    trained = sorted({int(r["iteration"]): r.get("mean_return") for r in training if r.get("iteration")}.items())
    if trained:
        values = [math.nan if value is None else value for _, value in trained]
        top.plot([it for it, _ in trained], values, color="gray", linewidth=1, alpha=0.7,
                 label="during training (stochastic, recent episodes)")  # fmt: skip
    top.fill_between(iterations, [m - s for m, s in zip(means, stds, strict=True)],
                     [m + s for m, s in zip(means, stds, strict=True)], color="tab:blue", alpha=0.15)  # fmt: skip
    evaluated = f"evaluated ({evaluation['episodes']} episodes, deterministic)"
    top.plot(iterations, means, "o-", color="tab:blue", label=evaluated)
    top.plot([best["iteration"]], [best["mean_return"]], marker="*", markersize=16, color="tab:red", linestyle="none",
             label=f"best: iteration {best['iteration']}")  # fmt: skip
    top.set_ylabel("mean episode return")
    top.legend(loc="lower right", fontsize="small")
    top.grid(alpha=0.3)
    if any(entry["success_rate"] is not None for entry in entries):
        rates = [math.nan if entry["success_rate"] is None else 100 * entry["success_rate"] for entry in entries]
        bottom.plot(iterations, rates, "o-", color="tab:green")
        if best["success_rate"] is not None:
            bottom.plot([best["iteration"]], [100 * best["success_rate"]], marker="*", markersize=16,
                        color="tab:red", linestyle="none")  # fmt: skip
        bottom.set_ylim(-5, 105)
        bottom.set_title(f"success: {evaluation.get('success_measure')}", fontsize="small")
    else:
        bottom.text(0.5, 0.5, "this task defines no success measure", ha="center", va="center",
                    transform=bottom.transAxes)  # fmt: skip
    bottom.set_ylabel("success rate (%)")
    bottom.set_xlabel("iteration")
    bottom.grid(alpha=0.3)
    figure.suptitle(f"{evaluation['task']}, {_library(evaluation)}: {Path(evaluation['run_dir']).name}")
    return save_figure(figure, path)
