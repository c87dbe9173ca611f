"""Benchmark: trials per hour through ``islab-train sweep`` (2 at a time) vs the same islab-train
commands one after another, and the sweep's own start-up overhead.

Each repeat runs, side by side on the same machine:

1. ``islab-train sweep`` of one Cartpole configuration x ``--trials`` seeds, ``max_concurrent 2``,
   ``cpus_per_trial 1``: an embedded Ray started and stopped by the sweep, all included (with
   ``--ray-address``: joining a Ray already running, as for a user who keeps one ``ray start
   --head`` up between sweeps);
2. the same trials' islab-train commands (taken from the sweep's ``--dry-run --json``), one after
   another, each in its own log directory;
3. the same commands two at a time without Ray (plain processes, each pair started together): the
   *machine ceiling*, what running two trials at once can give on this machine at all (two
   vCPUs may share one physical core, and memory bandwidth), whatever the sweep does.

Figures per repeat: trials/hour of each and the ratios to one-after-another (the sweep's
against the ceiling's says what Ray and Tune cost); "start -> first iteration": from starting
the command to the first trial's first ``progress.jsonl`` record, for the sweep and for the first
sequential command (plain islab-train start-up), and their difference (what Ray and Tune add).
Medians over the repeats are printed as a markdown table (docs/SWEEPS.md) and written as JSON.

    python scripts/bench_sweep.py --repeats 3 --out bench-sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml


def first_progress_watch(root: Path, found: dict[str, float], stop: threading.Event) -> None:
    """Record when the first progress.jsonl line appears anywhere under ``root``."""
    while not stop.is_set() and "first" not in found:
        for path in root.glob("**/progress.jsonl"):
            if path.stat().st_size > 0:
                found["first"] = time.monotonic()
                return
        time.sleep(0.05)


def timed(argv: list[str], cwd: Path, watch_root: Path) -> tuple[float, float | None, int]:
    """(wall seconds, seconds to the first progress record or None, exit code)."""
    found: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=first_progress_watch, args=(watch_root, found, stop), daemon=True)
    start = time.monotonic()
    watcher.start()
    code = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode
    wall = time.monotonic() - start
    stop.set()
    watcher.join()
    return wall, (found["first"] - start if "first" in found else None), code


def with_log_dir(trial: dict, root: Path) -> list[str]:
    """The trial's islab-train command, writing under ``root/<trial id>`` instead of the sweep's."""
    argv = list(trial["argv"])
    argv[argv.index("--log-dir") + 1] = str(root / trial["id"])
    return argv


def plain_pairs(trials: list[dict], work: Path, concurrent: int) -> tuple[float, int]:
    """The trials' commands ``concurrent`` at a time, plain processes (no Ray), with the environment
    the sweep gives a trial (its threads per rank: ``cpus_per_trial``): (wall seconds, first
    non-zero exit code or 0). One after another, the commands run as a user types them (the
    worker's default threads)."""
    start = time.monotonic()
    code = 0
    for first in range(0, len(trials), concurrent):
        group = [
            subprocess.Popen(with_log_dir(trial, work / "plain"), cwd=work, env={**os.environ, **trial["env"]},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for trial in trials[first : first + concurrent]
        ]  # fmt: skip
        code = code or next((c for c in (process.wait() for process in group) if c), 0)
    return time.monotonic() - start, code


def one_repeat(args: argparse.Namespace, work: Path) -> dict[str, float | None]:
    sweep_file = work / "bench.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "bench",
        "run": {"lib": "rsl_rl", "task": "Islab-Cartpole-v0", "device": "cpu", "nproc_per_node": 1,
                "num_envs": args.num_envs, "max_iterations": args.iterations},
        "seeds": args.trials,
        "cpus_per_trial": 1,
        "max_concurrent": args.concurrent,
    }))  # fmt: skip
    cli = [sys.executable, "-m", "islab.cli"]
    joined = ["--ray-address", args.ray_address] if args.ray_address else []
    sweep_wall, sweep_first, sweep_code = timed([*cli, "sweep", str(sweep_file), *joined], work, work / "logs")
    if sweep_code:
        raise SystemExit(f"the sweep failed (exit {sweep_code}); see {work}")
    plan = json.loads(
        subprocess.run([*cli, "sweep", str(sweep_file), "--dry-run", "--json"], cwd=work, capture_output=True,
                       text=True, check=True).stdout
    )  # fmt: skip
    seq_wall, seq_first, seq_code = 0.0, None, 0
    for index, trial in enumerate(plan["trials"]):
        argv = with_log_dir(trial, work / "sequential")
        wall, first, code = timed(argv, work, work / "sequential" / trial["id"])
        seq_wall += wall
        seq_code = seq_code or code
        if index == 0:
            seq_first = first
    pairs_wall, pairs_code = plain_pairs(plan["trials"], work, args.concurrent)
    if sweep_code or seq_code or pairs_code:
        raise SystemExit(f"a run failed (sweep exit {sweep_code}, sequential exit {seq_code}, "
                         f"{args.concurrent} at a time without Ray exit {pairs_code}); see {work}")  # fmt: skip
    trials = len(plan["trials"])
    return {
        "sweep_s": sweep_wall,
        "sequential_s": seq_wall,
        "plain_concurrent_s": pairs_wall,
        "sweep_trials_per_hour": trials / sweep_wall * 3600,
        "sequential_trials_per_hour": trials / seq_wall * 3600,
        "ratio": seq_wall / sweep_wall,
        "ceiling": seq_wall / pairs_wall,
        "ratio_of_ceiling": pairs_wall / sweep_wall,
        "sweep_first_iteration_s": sweep_first,
        "islab_train_first_iteration_s": seq_first,
        "ray_overhead_s": None if sweep_first is None or seq_first is None else sweep_first - seq_first,
    }


def median(rows: list[dict[str, float | None]], key: str) -> float | None:
    values = [row[key] for row in rows if row[key] is not None]
    return statistics.median(values) if values else None  # type: ignore[type-var]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None, help="write every repeat and the medians as JSON")
    parser.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                        help="the sweep joins this running Ray (e.g. one `ray start --head` on this machine) "
                             "instead of starting its own")  # fmt: skip
    args = parser.parse_args()
    rows = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="islab-bench-sweep-") as work:
            row = one_repeat(args, Path(work))
        rows.append(row)
        print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if v is not None),
              file=sys.stderr, flush=True)  # fmt: skip
    medians = {key: median(rows, key) for key in rows[0]}
    print(f"| {args.trials} trials (rsl_rl Cartpole, 1 CPU rank, {args.num_envs} envs, {args.iterations} it.) "
          f"| sweep, {args.concurrent} at a time | one after another | ratio |")  # fmt: skip
    print("|---|---|---|---|")
    print(f"| wall time (s), median of {args.repeats} | {medians['sweep_s']:.1f} | {medians['sequential_s']:.1f} | "
          f"{medians['ratio']:.2f}x |")  # fmt: skip
    print(f"| trials/hour | {medians['sweep_trials_per_hour']:.0f} | {medians['sequential_trials_per_hour']:.0f} | |")
    print(f"| machine ceiling: {args.concurrent} at a time without Ray (s) | {medians['plain_concurrent_s']:.1f} | "
          f"{medians['sequential_s']:.1f} | {medians['ceiling']:.2f}x (the sweep reaches "
          f"{medians['ratio_of_ceiling']:.2f} of it) |")  # fmt: skip
    first, plain, overhead = (medians[k] for k in ("sweep_first_iteration_s", "islab_train_first_iteration_s",
                                                    "ray_overhead_s"))  # fmt: skip
    if first is not None and plain is not None and overhead is not None:
        print(f"| start -> first iteration (s) | {first:.1f} | {plain:.1f} | sweep adds {overhead:.1f} s |")
    if args.out is not None:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "repeats": rows,
                                        "medians": medians}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
