"""What ``--video-interval`` costs a training run, per iteration (docs/benchmarks.md, "Video").

    python scripts/bench_video.py                          # 5 pairs of runs, the table on stdout
    python scripts/bench_video.py --runs 5 --out docs/video_bench.json

Each pair is two real ``islab-train`` runs of rsl_rl Cartpole on one CPU rank (``--num-envs``
1024, ``--max-iterations`` 100), interleaved: one without video, one with ``--video-interval``
(default 50, the interval the docs suggest). With 100 iterations and interval 50 the second run
records the episodes wanted at iterations 0 and 50 (one at the end would be dropped): the rate a
long run records at.

Two measures, the median over the pairs of each:

* **measured by the recorder**: every ``videos/train/iter_<N>.json`` holds what that video cost
  the training process (``cost_s``: the env steps' rendering and done-flag reads while it waited
  and recorded, then MP4 + TensorBoard encoding); their sum over the run / iterations = the cost
  per iteration, and / videos = the cost per recorded episode. This is exact and immune to load.
* **end to end**: the training wall time per iteration (``summary.json``: ``wall_s / iterations``)
  with video minus without. On a shared 2-core machine this difference is as noisy as the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def train(log_dir: Path, args: argparse.Namespace, video: bool) -> Path:
    command = [
        sys.executable, "-m", "islab.cli", "--lib", "rsl_rl", "--device", "cpu", "--nproc", "1",
        "--num-envs", str(args.num_envs), "--max-iterations", str(args.iterations), "--checkpoint-interval", "0",
        "--log-dir", str(log_dir), "--preflight", "off",
        *(("--video-interval", str(args.interval)) if video else ()),
    ]  # fmt: skip
    environment = {name: value for name, value in os.environ.items() if not name.startswith("ISLAB_")}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    (run_dir,) = log_dir.glob("*/*/*")
    return run_dir


def measure(args: argparse.Namespace) -> dict:
    pairs = []
    with tempfile.TemporaryDirectory(prefix="islab-bench-video-") as scratch:
        for index in range(args.runs):
            row = {}
            for video in (False, True):
                run_dir = train(Path(scratch, f"{index}-{video}"), args, video)
                summary = json.loads((run_dir / "summary.json").read_text())
                row["with" if video else "without"] = summary["wall_s"] / summary["iterations"]
                if video:
                    records = [json.loads(path.read_text()) for path in sorted(run_dir.glob("videos/train/*.json"))]
                    costs = [sum(record["cost_s"].values()) for record in records]
                    row["videos"] = len(records)
                    row["frames"] = [record["frames"] for record in records]
                    row["recorder_per_iteration"] = sum(costs) / summary["iterations"]
                    row["per_video"] = sum(costs) / max(len(costs), 1)
            row["difference"] = row["with"] - row["without"]
            pairs.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    median = {key: statistics.median(row[key] for row in pairs)
              for key in ("without", "with", "difference", "recorder_per_iteration", "per_video")}  # fmt: skip
    return {"settings": vars(args) | {"out": None}, "pairs": pairs, "median": median}


def table(result: dict) -> str:
    m, s = result["median"], result["settings"]
    return "\n".join([
        f"| rsl_rl Cartpole, 1 CPU rank x {s['num_envs']} envs, {s['iterations']} iterations, "
        f"--video-interval {s['interval']} (median of {s['runs']} pairs) | value |",
        "|---|---|",
        f"| iteration without video | {m['without'] * 1000:.1f} ms |",
        f"| recorder's own cost per iteration (rendering, flag reads, encoding) | "
        f"{m['recorder_per_iteration'] * 1000:.2f} ms ({m['recorder_per_iteration'] / m['without']:.2%}) |",
        f"| recorder's cost per recorded episode | {m['per_video'] * 1000:.0f} ms |",
        f"| end to end: iteration with video minus without | {m['difference'] * 1000:+.1f} ms "
        f"({m['difference'] / m['without']:+.1%}) |",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval", type=int, default=50)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=None, help="also write the result as JSON")
    args = parser.parse_args()
    result = measure(args)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
