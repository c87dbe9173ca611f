"""Section 6: command-line latency, ``islab-train ... --dry-run`` against ``python -c "import torch"``,
and the wall time of the commands a user types to look around (``--help``, ``tasks``, ``doctor``:
goal under 2 s each on a warm page cache)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from .common import Options, islab_train, median


def run_cli_latency(opts: Options) -> dict[str, Any]:
    dry_run = [*islab_train(), "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--dry-run"]
    import_torch = [sys.executable, "-c", "import torch"]
    opts.commands["cli dry-run"] = "islab-train " + " ".join(dry_run[len(islab_train()) :])
    opts.commands["import torch"] = 'python -c "import torch"'
    looking_around = {
        "help": [*islab_train(), "--help"],
        "tasks": [*islab_train(), "tasks"],
        "doctor": [*islab_train(), "doctor", "--device", "cpu", "--nproc", "2"],
    }
    for name, command in looking_around.items():
        opts.commands[f"cli {name}"] = "islab-train " + " ".join(command[len(islab_train()) :])
    samples: dict[str, list[float]] = {"dry_run": [], "import_torch": [], **{name: [] for name in looking_around}}

    def timed(command: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=opts.work_dir)
        return time.perf_counter() - started

    if not opts.quick:  # warm the page cache for each (the smoke run only checks that each runs)
        for command in (dry_run, import_torch, *looking_around.values()):
            timed(command)
    for _ in range(opts.runs):
        samples["dry_run"].append(timed(dry_run))
        samples["import_torch"].append(timed(import_torch))
        for name, command in looking_around.items():
            samples[name].append(timed(command))
    a, b = median(samples["dry_run"]), median(samples["import_torch"])
    return {
        "samples_s": samples,
        "median_s": {"dry_run": a, "import_torch": b, **{name: median(samples[name]) for name in looking_around}},
        "ratio": a / b if a and b else None,
        "ratio_paired": median(x / y for x, y in zip(samples["dry_run"], samples["import_torch"], strict=True)),
    }
