"""Train a Cartpole run on 2 CPU ranks keeping every checkpoint, evaluate them all with
``islab-train eval``, and copy its ``eval.png`` to the docs (docs/EVAL.md shows it).

    python scripts/eval_figure.py [--log-dir /tmp/islab-eval-figure] [--out docs/figures/eval-cartpole.png]

Prints the commands it runs (as a user would type them), their wall times and eval's table.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from islab import rundir

TRAIN = ["--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "256", "--max-iterations", "60",
         "--checkpoint-interval", "5", "--keep-checkpoints", "12", "--run-name", "eval-figure"]  # fmt: skip
EVAL = ["--checkpoints", "all", "--nproc", "2", "--episodes", "64"]


def islab_train(args: list[str]) -> float:
    print("$ islab-train " + shlex.join(args), flush=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "islab.cli", *args], check=True)
    took = time.perf_counter() - started
    print(f"({took:.1f} s)", flush=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/islab-eval-figure"))
    parser.add_argument("--out", type=Path, default=Path("docs/figures/eval-cartpole.png"))
    args = parser.parse_args()
    shutil.rmtree(args.log_dir, ignore_errors=True)
    islab_train([*TRAIN, "--log-dir", str(args.log_dir)])
    (run_dir,) = args.log_dir.glob("*/*/*")
    islab_train(["eval", str(run_dir), *EVAL])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rundir.eval_plot_path(run_dir), args.out)
    print(f"copied {rundir.eval_plot_path(run_dir)} -> {args.out}")


if __name__ == "__main__":
    main()
