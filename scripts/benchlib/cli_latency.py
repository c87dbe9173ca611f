"""Section 6: command-line latency, ``islab-train ... --dry-run`` against ``python -c "import torch"``."""

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
    samples: dict[str, list[float]] = {"dry_run": [], "import_torch": []}

    def timed(command: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=opts.work_dir)
        return time.perf_counter() - started

    timed(dry_run), timed(import_torch)  # warm the page cache for both
    for _ in range(opts.runs):
        samples["dry_run"].append(timed(dry_run))
        samples["import_torch"].append(timed(import_torch))
    a, b = median(samples["dry_run"]), median(samples["import_torch"])
    return {
        "samples_s": samples,
        "median_s": {"dry_run": a, "import_torch": b},
        "ratio": a / b if a and b else None,
        "ratio_paired": median(x / y for x, y in zip(samples["dry_run"], samples["import_torch"], strict=True)),
    }
