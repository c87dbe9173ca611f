"""Plot an rsl_rl Islab-Quadcopter-v0 run from its TensorBoard events: the mean final distance to
the goal (Isaac Lab's Metrics/final_distance_to_goal) and the mean episode return per iteration.

    python scripts/quadcopter_figure.py RUN_DIR OUT.png "title"
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the headless backend
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main() -> None:
    run_dir, out, title = sys.argv[1:4]
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()

    def series(tag: str) -> tuple[list[int], list[float]]:
        scalars = events.Scalars(tag)
        return [e.step for e in scalars], [e.value for e in scalars]

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    top.plot(*series("Metrics/final_distance_to_goal"), color="tab:blue")
    top.axhline(0.3, color="gray", ls="--", lw=1, label="0.3 m")
    top.set_ylabel("mean final distance to goal [m]")
    top.set_yscale("log")
    top.legend()
    top.grid(alpha=0.3)
    bottom.plot(*series("Train/mean_reward"), color="tab:orange")
    bottom.set_ylabel("mean episode return")
    bottom.set_xlabel("iteration")
    bottom.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main()
