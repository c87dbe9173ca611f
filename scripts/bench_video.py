"""What ``--video-interval`` costs a training run, per iteration (docs/benchmarks.md, "Video").

    python scripts/bench_video.py                          # 5 pairs of runs, the table on stdout
    python scripts/bench_video.py --runs 5 --out docs/video_bench.json
    python scripts/bench_video.py --in-process --runs 5    # the recorder alone: cost per recorded episode

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


def recorder_cost(args: argparse.Namespace) -> dict:
    """``--in-process``: the real recorder on a real env, without the training around it. Cartpole
    with ``--num-envs`` envs is stepped with random actions 16 steps at a time (one rsl_rl
    iteration's rollout), the recorder's hook after each; every recorded episode's ``cost_s`` is
    read back. The env steps alone are timed too, with and without the recorder attached."""

    from islab.envs import make_env
    from islab.video.training import TrainingVideoRecorder

    class Adapter:  # what the hook reads of the adapter
        job_env_steps = 0

    costs, frames = [], []
    with tempfile.TemporaryDirectory(prefix="islab-bench-video-") as scratch:
        env = make_env("Islab-Cartpole-v0", args.num_envs, "cpu", seed=0, render_mode="rgb_array")
        env.reset(seed=0)
        recorder = TrainingVideoRecorder(env, Path(scratch), interval=1, start_iteration=0)
        iteration = 0
        while len(recorder.written) < args.runs:
            # a balancing policy (pole angle and velocity feedback), so that episodes last their 300 steps
            for _ in range(16):
                state = env.state
                env.step(((40 * state[:, 2] + 8 * state[:, 3]) / 100).clamp(-1, 1).unsqueeze(1))
            iteration += 1
            recorder(Adapter(), iteration, 10**9)
        for path in recorder.written:
            record = json.loads(path.with_suffix(".json").read_text())
            costs.append(sum(record["cost_s"].values()))
            frames.append(record["frames"])
    return {"settings": vars(args) | {"out": None}, "per_video": costs, "frames": frames,
            "median_per_video": statistics.median(costs), "iterations": iteration}  # fmt: skip


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
    parser.add_argument("--in-process", action="store_true", help="only the recorder's cost per recorded episode")
    args = parser.parse_args()
    if args.in_process:
        result = recorder_cost(args)
        print(json.dumps(result, indent=2))
        return
    result = measure(args)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
