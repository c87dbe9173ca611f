"""islab-train benchmark suite (issue 5): environment speed, training speed, scaling, start-up.

    python scripts/bench.py                      # full CPU run (~15 min on a 2-core machine)
    python scripts/bench.py --quick              # tiny sizes, one run: the CI smoke test
    python scripts/bench.py --out docs/benchmarks.md --json docs/benchmarks.json
    python scripts/bench.py --device cuda        # the GPU sections (env up to 262144 envs, NCCL)
    python scripts/bench.py --tasks Islab-Cartpole-v0,Islab-Quadcopter-v0,Mjlab-Cartpole-Balance

Sections 1-4 run for every task of ``--tasks`` (default ``Islab-Cartpole-v0``), one row per task in
the same tables; the sizes per kind of task are :data:`benchlib.common.TASK_SCALES` (mjlab's tasks step ~1000x
slower on a CPU: 64 envs per rank instead of 4096). An mjlab task needs the ``[mjlab]`` extra and is
skipped with a line in the report without it. Time to solve (5) and sync (8) stay on Cartpole.

Every env and CLI number is the median of ``--runs`` runs (5 by default). Training numbers are
the median of ``--train-runs`` launches (3 by default), each measuring 3-6 iterations after its
warm-up, and time-to-solve the median of ``--tts-runs`` launches (2): every launch pays ~10-15 s of
process start-up on a 2-core machine, and five launches of each of the 15 training configurations
would take ~30 minutes (pass ``--train-runs 5 --tts-runs 5`` for that). Where two things are
compared, their runs are interleaved (A B A B ..., not A A A B B B), so a change of machine load
hits both sides alike. The machine, the versions, the load average before and after, and the exact commands go
into the report: on a shared machine, read ratios, not absolute numbers.

What each section measures, and why that way
--------------------------------------------
1. **Env step throughput** (env steps/s = num_envs x steps / wall time), per task. Our
   ``Islab-Cartpole-v0`` against gymnasium's numpy-vectorized CartPole
   (``make_vec(..., "vector_entry_point")``; other tasks have no gymnasium twin), in one process,
   one thread (torch and BLAS pinned to 1), random actions drawn beforehand (so RNG cost is not
   measured), at 256-16384 envs (mjlab: 16-256). Variants: ``eager`` (the default step: fewer ops,
   buffers, in place) and ``compiled`` (``ISLAB_ENV_COMPILE=1``: the fused torch.compile kernel,
   for tasks that have one; first-call compile time reported separately). Our step does 2 physics
   substeps (decimation 2) plus auto-reset; gymnasium does 1 plus auto-reset, so per simulated
   second ours does more. It runs in a child process per task without OPENBLAS_CORETYPE /
   OPENBLAS_L2_SIZE (they slow numpy on this kind of machine), and records the BLAS kernel numpy
   uses (threadpoolctl).
2. **Training throughput** per task and library: env steps/s including learning, 1 rank x 1 thread
   (``ISLAB_THREADS_PER_RANK=1``), 4096 envs (mjlab: 64), through the real ``islab-train``, from
   ``progress.jsonl`` after skipping warm-up iterations (start-up, JIT). The **env share** is the
   time inside ``env.step`` divided by iteration time over the same window, measured by a probe in
   the rank (``scripts/bench_hooks``: sitecustomize wraps ``DirectRLEnv.step``).
3. **Scaling efficiency**: total steps/s of 2 ranks x 1 thread / (2 x 1 rank x 1 thread), same
   envs per rank (weak scaling), each task and library, runs interleaved 1-rank/2-rank. On a 2-core machine
   2 ranks use every core, so anything else running (the OS, other users) is taken from them. The
   **machine ceiling** measures that: 2 independent 1-rank jobs started together (no process group,
   nothing shared), total steps/s / (2 x one job alone). Scaling / ceiling is what distributed
   training itself costs; the ceiling is what the machine costs (a VM's vCPUs share a host).
4. **Gradient-sync overhead**: at 2 ranks, time inside collectives (``torch.distributed``
   all_reduce/broadcast/..., skrl-JAX's reduce/broadcast) / iteration time, per rank; the time
   includes waiting for the slower rank, which is how the library experiences it.
5. **Time to solve** (rsl_rl): training time until the logged mean episode return reaches 270,
   1 rank vs 2 ranks, weak (same envs per rank: 2x samples per update) and strong scaling (same
   total envs split across ranks: same samples per update, half per rank). ``--max-iterations``
   counts updates per run, so with weak scaling 2 ranks consume twice the samples. Time is
   ``time_s`` of ``progress.jsonl`` (from the start of training; process start-up excluded). A run
   stops as soon as the threshold is reached.
6. **Command-line latency**: wall time of ``islab-train --lib rsl_rl --device cpu --nproc 2
   --dry-run`` vs ``python -c "import torch"``, interleaved; the launcher must not import torch.
7. **GPU** (``--device cuda``): env steps/s at 4096-262144 envs; training steps/s per library at
   4096 envs per GPU over NCCL with all visible GPUs, beside Isaac Lab's published Cartpole figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The parts live in scripts/benchlib/, beside this file: run as a script, this folder is on sys.path
# already; loaded from its file (the tests: importlib's spec_from_file_location), it is put there.
SCRIPTS = str(Path(__file__).resolve().parent)
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

from benchlib.cli_latency import run_cli_latency  # noqa: E402
from benchlib.common import (  # noqa: E402
    CARTPOLE,
    LIBS,
    SECTIONS,
    build_options,
    load_average,
    machine_info,
    package_versions,
    resolve_tasks,
)
from benchlib.env import env_child, run_env_section  # noqa: E402
from benchlib.launch import run_launch  # noqa: E402
from benchlib.report import render_markdown  # noqa: E402
from benchlib.sync import run_sync_section  # noqa: E402
from benchlib.training import run_time_to_solve, run_training_sections  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke test (CI)")
    parser.add_argument("--runs", type=int, help="runs per env and CLI number (default 5; --quick: 1)")
    parser.add_argument("--train-runs", type=int, help="launches per training configuration (default 3)")
    parser.add_argument("--tts-runs", type=int, help="launches per time-to-solve configuration (default 2)")
    parser.add_argument("--tts-envs", type=int, help="envs per rank for time to solve (default 4096)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--libs", nargs="+", choices=list(LIBS), help="libraries to train (default: all four)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, help="default: all")
    parser.add_argument("--tasks", nargs="+", default=[CARTPOLE], metavar="TASK",
                        help=f"tasks of sections 1-4, comma- or space-separated (default {CARTPOLE}); "
                        "mjlab ids (Mjlab-Cartpole-Balance) need the [mjlab] extra and are skipped "
                        "with a note without it. Time to solve and sync stay on Cartpole.")  # fmt: skip
    parser.add_argument("--sync-envs", type=int, help="envs per rank for the stock-vs-fused section (default 4096)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="include the torch.compile'd env (default: on, off with --quick)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the Markdown report here (it is always printed)")
    parser.add_argument("--json", type=Path, help="write all raw numbers here")
    parser.add_argument("--work-dir", type=Path, help="keep run directories here (default: a temp dir, removed)")
    parser.add_argument("--env-child", nargs=2, metavar=("CONFIG", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.env_child:
        config = json.loads(Path(args.env_child[0]).read_text())
        Path(args.env_child[1]).write_text(json.dumps(env_child(config)))
        return 0

    try:
        tasks, skipped_tasks = resolve_tasks(args.tasks)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for task, why in skipped_tasks.items():
        print(f"[bench] skip task {task}: {why}", file=sys.stderr)
    opts = build_options(args)
    opts.tasks = tasks
    if args.sync_envs:
        opts.sync_envs = args.sync_envs
    elif opts.quick:
        opts.sync_envs = opts.scale(CARTPOLE).train_envs
    started = time.perf_counter()
    load_start = load_average()
    tmp = None
    if args.work_dir:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        opts.work_dir = str(args.work_dir.resolve())
    else:
        tmp = tempfile.mkdtemp(prefix="islab-bench-")
        opts.work_dir = tmp
    report: dict[str, Any] = {}
    try:
        if "env" in opts.sections:
            print("[bench] env step throughput", file=sys.stderr)
            report["env"] = run_env_section(opts)
        if "cli" in opts.sections:
            print("[bench] command-line latency", file=sys.stderr)
            report["cli"] = run_cli_latency(opts)
        if "launch" in opts.sections:
            print("[bench] launch: islab-train vs the bare torchrun command it plans", file=sys.stderr)
            report["launch"] = run_launch(opts)
        if "train" in opts.sections:
            report["train"] = run_training_sections(opts)
        if "sync" in opts.sections:
            report["sync"] = run_sync_section(opts)
        if "tts" in opts.sections:
            report["tts"] = run_time_to_solve(opts)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    cores = os.cpu_count() or 1
    load_end = load_average()
    report["meta"] = {
        "command": "python scripts/bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "quick": opts.quick,
        "device": opts.device,
        "tasks": opts.tasks,
        "skipped_tasks": skipped_tasks,
        "machine": machine_info(),
        "versions": package_versions(),
        "load_start": load_start,
        "load_end": load_end,
        "shared_note": (
            f"the machine was shared: load average above its {cores} cores during the run, so absolute numbers are "
            "low and noisy; the interleaved ratios are the numbers to read"
            if max(load_start[:1] + load_end[:1] or [0]) > cores * 0.75
            else ""
        ),
        "runs": opts.runs,
        "train_runs": opts.train_runs,
        "tts_runs": opts.tts_runs,
        "elapsed_s": time.perf_counter() - started,
        "commands": opts.commands,
    }
    markdown = render_markdown(report)
    print(markdown)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown, encoding="utf-8")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
