"""Section ``launch``: what islab-train costs on top of the torchrun command it plans.

The same tiny job (rsl_rl Cartpole, 2 CPU ranks, 64 envs, 1 iteration) is started three ways, one
after the other in each pair round, the order rotated every round so that neither way always runs
on a warmer page cache:

* ``islab-train --preflight off`` -- the launcher, our worker, no pre-flight;
* ``islab-train`` -- the same with the pre-flight (the default for any job of several ranks);
* bare torchrun -- node 0's command of ``islab-train ... --dry-run --json`` with the environment it
  lists, started directly: what a user pasting the printed command gets.

Two times per launch, from the moment the process is started: **first iteration** (the run
directory's ``progress.jsonl`` holds its first record: rank 0 finished iteration 1, polled every
10 ms) and **return** (the process has exited). Reported as medians and as the median of the
paired differences (islab-train minus bare torchrun, same round).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from islab import rundir

from .common import Options, islab_train, median

JOB = ["--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "64", "--max-iterations", "1"]
WAYS = ("islab_train", "islab_train_preflight", "bare_torchrun")


def _has_progress(run_dirs: Callable[[], list[Path]]) -> bool:
    for run_dir in run_dirs():
        progress = Path(rundir.progress_path(run_dir))
        if progress.is_file() and progress.stat().st_size > 0:
            return True
    return False


def _timed(
    argv: list[str], env: dict[str, str], run_dirs: Callable[[], list[Path]], cwd: str
) -> tuple[float | None, float]:
    """(seconds to the first progress record in the run directory, seconds to the process's exit)."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    while process.poll() is None:
        if first is None and _has_progress(run_dirs):
            first = time.perf_counter() - started
        time.sleep(0.01)
    returned = time.perf_counter() - started
    if first is None and _has_progress(run_dirs):
        first = returned  # the first record appeared within the last poll interval
    if process.returncode != 0:
        raise RuntimeError(f"{argv[:3]}... exited {process.returncode}: {process.stderr.read()[-2000:]}")
    process.stderr.close()
    return first, returned


def run_launch(opts: Options) -> dict[str, Any]:
    logs = Path(opts.work_dir) / "launch-logs"
    base_env = {name: value for name, value in os.environ.items() if not name.startswith("ISLAB_")}
    opts.commands["launch islab-train"] = "islab-train " + " ".join(JOB) + " --preflight off"
    opts.commands["launch islab-train (pre-flight)"] = "islab-train " + " ".join(JOB)
    opts.commands["launch bare torchrun"] = (
        "node 0's argv and env of islab-train " + " ".join(JOB) + " --dry-run --json"
    )

    def command(way: str, name: str) -> tuple[list[str], dict[str, str], Callable[[], list[Path]]]:
        argv = [*islab_train(), *JOB, "--log-dir", str(logs), "--run-name", name]
        if way == "islab_train":
            argv += ["--preflight", "off"]
        if way != "bare_torchrun":  # islab-train names its run directory <time>_<name> at launch
            return argv, base_env, lambda: list((logs / "rsl_rl" / "Islab-Cartpole-v0").glob(f"*_{name}"))
        planned = json.loads(subprocess.run([*argv, "--dry-run", "--json"], capture_output=True, text=True,
                                            check=True, env=base_env).stdout)["nodes"][0]  # fmt: skip
        run_dir = Path(planned["argv"][planned["argv"].index("--run-dir") + 1])
        return planned["argv"], {**base_env, **planned["env"]}, lambda: [run_dir]

    # --quick (the suite's smoke test): one round, kept, without the pre-flight variant
    ways = WAYS if not opts.quick else ("islab_train", "bare_torchrun")
    samples: dict[str, dict[str, list[float | None]]] = {way: {"first_s": [], "return_s": []} for way in ways}
    warm_up = 0 if opts.quick else 1  # the first round warms the page cache and is dropped
    for round_index in range(opts.runs + warm_up):
        order = ways[round_index % len(ways) :] + ways[: round_index % len(ways)]
        for way in order:
            name = f"{way}-{round_index}"
            argv, env, run_dirs = command(way, name)
            first, returned = _timed(argv, env, run_dirs, opts.work_dir)
            if round_index >= warm_up:
                samples[way]["first_s"].append(first)
                samples[way]["return_s"].append(returned)

    def paired(way: str, key: str) -> float | None:
        pairs = zip(samples[way][key], samples["bare_torchrun"][key], strict=True)
        return median(a - b for a, b in pairs if a is not None and b is not None)

    return {
        "job": " ".join(JOB),
        "samples_s": samples,
        "median_s": {way: {key: median(values) for key, values in by_key.items()} for way, by_key in samples.items()},
        "minus_bare_s": {
            way: {key: paired(way, key) for key in ("first_s", "return_s")} for way in ways if way != "bare_torchrun"
        },
    }
