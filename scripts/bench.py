"""islab-train benchmark suite (issue 5): environment speed, training speed, scaling, start-up.

    python scripts/bench.py                      # full CPU run (~15 min on a 2-core machine)
    python scripts/bench.py --quick              # tiny sizes, one run: the CI smoke test
    python scripts/bench.py --out docs/benchmarks.md --json docs/benchmarks.json
    python scripts/bench.py --device cuda        # the GPU sections (env up to 262144 envs, NCCL)
    python scripts/bench.py --tasks Islab-Cartpole-v0,Islab-Quadcopter-v0,Mjlab-Cartpole-Balance

Sections 1-4 run for every task of ``--tasks`` (default ``Islab-Cartpole-v0``), one row per task in
the same tables; the sizes per kind of task are :data:`TASK_SCALES` (mjlab's tasks step ~1000x
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
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islab.rundir import read_progress

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "scripts" / "bench_hooks"
CARTPOLE = "Islab-Cartpole-v0"  # the default task; gymnasium's CartPole, time to solve and sync use it
SOLVED_RETURN = 270.0  # Cartpole's return (section 5)
SECTIONS = ("env", "train", "sync", "tts", "cli")

# (lib, ml_framework) -> label; the order is the order of the report
LIBS: dict[str, tuple[str, str]] = {
    "rsl_rl": ("rsl_rl", "torch"),
    "rl_games": ("rl_games", "torch"),
    "skrl-torch": ("skrl", "torch"),
    "skrl-jax": ("skrl", "jax"),
}
# warm-up iterations skipped, then measured iterations; an iteration is 16 (rsl_rl, rl_games)
# or 32 (skrl) env steps per env. skrl-JAX JIT-compiles during its first two iterations.
ITERATIONS: dict[str, tuple[int, int]] = {
    "rsl_rl": (2, 6),
    "rl_games": (2, 6),
    "skrl-torch": (1, 4),
    "skrl-jax": (2, 3),
}
GOALS = {
    "env_vs_gym_4096": 2.0,
    "env_share": 0.10,
    "scaling": 0.95,
    "sync_share": 0.05,
    "strong_tts_ratio": 0.6,
    "cli_ratio": 0.3,
    "gpu_env_steps": 1e9,
}
LAUNCH_LOCK = threading.Lock()


@dataclass(frozen=True)
class TaskScale:
    """Sizes for one kind of task: envs per rank in training (sections 2-4), env counts and env-step
    budget per measurement in section 1."""

    train_envs: int
    env_sizes: tuple[int, ...]
    env_target_steps: int


# The per-task sizes, in one place: keyed by the task's extra ("" = our own torch tasks, Cartpole and
# Quadcopter: ~1-60M env steps/s on one CPU core), then quick / cpu / cuda. mjlab's tasks (MuJoCo
# Warp) step at ~100-4000 env steps/s on a CPU core, so they get 64 envs per CPU rank (their
# registered default) and a budget that keeps one measurement near 10 s; on a GPU, mjlab's own 4096.
TASK_SCALES: dict[str, dict[str, TaskScale]] = {
    "": {
        "quick": TaskScale(64, (64, 256), 20_000),
        "cpu": TaskScale(4096, (256, 1024, 4096, 16384), 4_000_000),
        "cuda": TaskScale(4096, (4096, 16384, 65536, 262144), 50_000_000),
    },
    "mjlab": {
        "quick": TaskScale(16, (16,), 320),
        "cpu": TaskScale(64, (16, 64, 256), 10_000),
        "cuda": TaskScale(4096, (1024, 4096, 16384), 2_000_000),
    },
}
ISAAC_LAB_PUBLISHED = "Isaac Lab Cartpole-Direct, rl_games, 4096 envs: 1x L40 260k, RTX 4090 510k env steps/s"


# --------------------------------------------------------------------------------------------
# small helpers


def median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def fmt(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def verdict(value: float | None, goal: float, higher_is_better: bool) -> str:
    if value is None:
        return "n/a"
    met = value >= goal if higher_is_better else value <= goal
    return "met" if met else "**MISSED**"


def package_versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for name in ("torch", "numpy", "gymnasium", "rsl-rl-lib", "rl-games", "skrl", "jax", "islab-train"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    return info


def islab_train() -> list[str]:
    script = Path(sys.executable).parent / "islab-train"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from islab.cli import main; main()"]


# --------------------------------------------------------------------------------------------
# 1 + 7a: env step throughput (runs in a child process: clean BLAS variables, one thread)


def env_child(config: dict[str, Any]) -> dict[str, Any]:
    """Measure one task's env steps/s for every (size, variant), ``runs`` times, interleaved."""
    import dataclasses
    import warnings

    import gymnasium
    import numpy as np
    import torch

    torch.set_num_threads(1)
    blas: list[dict[str, Any]] = []
    limiter: Any = contextlib.nullcontext()
    try:
        import threadpoolctl

        limiter = threadpoolctl.threadpool_limits(1)
        blas = [
            {k: v for k, v in pool.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for pool in threadpoolctl.threadpool_info()
        ]
    except ImportError:
        blas = [{"note": "threadpoolctl not installed; BLAS kernel not recorded"}]

    from islab.envs import load_entry_point
    from islab.tasks import import_task

    task, device, sizes = config["task"], config["device"], config["sizes"]
    runs, target = config["runs"], config["target_env_steps"]
    info = import_task(task)  # registers it with gymnasium, as a rank does
    spec = gymnasium.spec(task)
    cfg_class = load_entry_point(spec.kwargs["env_cfg_entry_point"])
    env_class = load_entry_point(str(spec.entry_point))
    variants = (["gymnasium"] if config["gymnasium"] else []) + ["eager"]
    # "compiled" only where the task has a fused step (Cartpole: yes; Quadcopter, mjlab: no)
    if config["compile"] and "compile_step" in {f.name for f in dataclasses.fields(cfg_class)}:
        variants.append("compiled")
    sync: Callable[[], None] = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    steppers: dict[tuple[str, int], Callable[[int], None]] = {}
    compile_s: dict[int, float] = {}
    for size in sizes:
        bank = torch.rand(8, size, info.action_size, device=device) * 2 - 1
        for variant in list(variants):
            if variant == "gymnasium":
                vec = gymnasium.make_vec("CartPole-v1", num_envs=size, vectorization_mode="vector_entry_point")
                vec.reset(seed=0)
                np_bank = np.random.default_rng(0).integers(0, 2, size=(8, size))

                def gym_step(i: int, vec: Any = vec, np_bank: Any = np_bank) -> None:
                    vec.step(np_bank[i & 7])

                steppers[variant, size] = gym_step
                continue
            kwargs: dict[str, Any] = {"num_envs": size, "seed": 0}
            if variant == "compiled":
                kwargs["compile_step"] = True
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "has no compiled step": answered below
                env = env_class(cfg_class(**kwargs), device=device)
            if variant == "compiled" and not env.compiled:
                variants.remove(variant)
                continue
            env.reset()
            if variant == "compiled":
                started = time.perf_counter()
                env.step(bank[0])
                sync()
                compile_s[size] = time.perf_counter() - started
                if not env.compiled:  # the compile failed: the env went back to eager
                    compile_s[size] = float("nan")

            def torch_step(i: int, env: Any = env, bank: Any = bank) -> None:
                env.step(bank[i & 7])

            steppers[variant, size] = torch_step

    samples: dict[str, dict[int, list[float]]] = {v: {s: [] for s in sizes} for v in variants}
    with limiter:
        for run in range(runs):
            for size in sizes:
                steps = max(20, target // size)
                order = variants[run % len(variants) :] + variants[: run % len(variants)]  # rotate who goes first
                for variant in order:
                    step = steppers[variant, size]
                    for i in range(5):
                        step(i)
                    sync()
                    started = time.perf_counter()
                    for i in range(steps):
                        step(i)
                    sync()
                    samples[variant][size].append(size * steps / (time.perf_counter() - started))
    return {
        "blas": blas,
        "torch_threads": torch.get_num_threads(),
        "variants": variants,
        "compile_s": {str(k): v for k, v in compile_s.items()},
        "samples": {v: {str(s): xs for s, xs in by_size.items()} for v, by_size in samples.items()},
    }


def run_env_section(opts: Options) -> dict[str, Any]:
    """Section 1 for each task, one child process per task (an mjlab task imports Warp)."""
    return {"tasks": {task: run_env_task(opts, task) for task in opts.tasks}}


def run_env_task(opts: Options, task: str) -> dict[str, Any]:
    print(f"[bench] env step throughput: {task}", file=sys.stderr)
    sizes = list(opts.scale(task).env_sizes)
    config = {
        "task": task,
        "device": opts.device,
        "sizes": sizes,
        "gymnasium": opts.device == "cpu" and task == CARTPOLE,  # gymnasium's CartPole: the same task
        "compile": opts.compile,
        "runs": opts.runs,
        "target_env_steps": opts.scale(task).env_target_steps,
    }
    env = dict(os.environ)
    removed = [name for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if env.pop(name, None) is not None]
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config_path, out_path = Path(tmp, "config.json"), Path(tmp, "out.json")
        config_path.write_text(json.dumps(config))
        command = [sys.executable, str(Path(__file__).resolve()), "--env-child", str(config_path), str(out_path)]
        subprocess.run(command, env=env, check=True, cwd=ROOT)
        result = json.loads(out_path.read_text())
    result["wall_s"] = time.perf_counter() - started  # the child's start-up included
    result["openblas_variables_removed"] = removed
    result["sizes"] = sizes
    result["median"] = {v: {s: median(xs) for s, xs in by_size.items()} for v, by_size in result["samples"].items()}
    if "gymnasium" in result["median"]:
        gym = result["median"]["gymnasium"]
        result["ratio_vs_gym"] = {
            v: {s: (x / gym[s] if x and gym.get(s) else None) for s, x in by_size.items()}
            for v, by_size in result["median"].items()
            if v != "gymnasium"
        }
        # ratio per interleaved run, then its median: robust to load changes between runs
        result["ratio_vs_gym_paired"] = {
            v: {
                s: median(
                    a / b for a, b in zip(result["samples"][v][s], result["samples"]["gymnasium"][s], strict=True)
                )
                for s in result["samples"][v]
            }
            for v in result["median"]
            if v != "gymnasium"
        }
    return result


# --------------------------------------------------------------------------------------------
# 2-5 + 7b: training through the real launcher


@dataclass
class LaunchResult:
    label: str
    nproc: int
    num_envs: int
    returncode: int
    wall_s: float
    run_dir: str | None
    progress: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[int, dict[str, Any]] = field(default_factory=dict)
    log: str = ""

    def window(self, warmup: int) -> tuple[float, float, int] | None:
        """(start, end, env steps) over the iterations after ``warmup``, from progress.jsonl."""
        if len(self.progress) <= warmup or warmup < 1:
            return None
        first, last = self.progress[warmup - 1], self.progress[-1]
        return first["time_s"], last["time_s"], last["env_steps"] - first["env_steps"]

    def steps_per_s(self, warmup: int) -> float | None:
        window = self.window(warmup)
        if window is None or window[1] <= window[0]:
            return None
        return window[2] / (window[1] - window[0])

    def _measured(self, warmup: int, rank: int) -> tuple[dict[str, Any], float, float] | None:
        """``rank``'s timings and the (start, end) of its iterations after ``warmup``, if any."""
        timing = self.timings.get(rank)
        if not timing or len(timing["iteration_end"]) <= warmup:
            return None
        return timing, timing["iteration_end"][warmup - 1], timing["iteration_end"][-1]

    def share(self, bucket: str, warmup: int, rank: int = 0) -> float | None:
        """Fraction of the post-warm-up iterations spent in ``bucket`` calls, on ``rank``."""
        measured = self._measured(warmup, rank)
        if measured is None:
            return None
        timing, start, end = measured
        inside = sum(d for s, d, _ in timing[bucket] if start <= s < end)
        return inside / (end - start) if end > start else None

    def sync_floor(self, warmup: int, rank: int = 0) -> float | None:
        """Lower bound of the pure transfer cost of the collectives: for each kind of call, count x
        its fastest call (a call that did not wait for the other rank), / iteration time. The
        difference to ``share("collective")`` is time spent waiting for the slower rank."""
        measured = self._measured(warmup, rank)
        if measured is None:
            return None
        timing, start, end = measured
        by_name: dict[str, list[float]] = {}
        for s, d, name in timing["collective"]:
            if start <= s < end:
                by_name.setdefault(name, []).append(d)
        return sum(len(v) * min(v) for v in by_name.values()) / (end - start) if end > start else None

    def collective_calls(self, warmup: int, rank: int = 0) -> tuple[float, float] | None:
        """(collective calls per iteration, median time of one call in seconds) on ``rank``: with
        a fixed cost per call on the machine, the count is what a library controls."""
        measured = self._measured(warmup, rank)
        if measured is None:
            return None
        timing, start, end = measured
        calls = [d for s, d, _ in timing["collective"] if start <= s < end]
        iterations = len(timing["iteration_end"]) - warmup
        return (len(calls) / iterations, statistics.median(calls)) if calls and iterations else None

    def cpu_use(self, warmup: int, rank: int = 0) -> float | None:
        """CPU time / wall time of ``rank`` over the measured iterations (1.0 = a full core)."""
        timing = self.timings.get(rank)
        if not timing or len(timing.get("iteration_cpu", [])) <= warmup:
            return None
        wall = timing["iteration_end"][-1] - timing["iteration_end"][warmup - 1]
        return (timing["iteration_cpu"][-1] - timing["iteration_cpu"][warmup - 1]) / wall if wall > 0 else None

    def time_to_return(self, threshold: float) -> float | None:
        for record in self.progress:
            if record.get("mean_return") is not None and record["mean_return"] >= threshold:
                return record["time_s"]
        return None


def launch_command(
    opts: Options, task: str, label: str, nproc: int, num_envs: int, iterations: int, **kw: Any
) -> list[str]:
    lib, framework = LIBS[label]
    command = [*islab_train(), "--lib", lib, "--ml-framework", framework, "--task", task]
    if opts.device == "cuda":
        command += ["--gpus", str(nproc)]
    else:
        command += ["--device", "cpu", "--nproc", str(nproc)]
    command += ["--num-envs", str(num_envs), "--max-iterations", str(iterations)]
    command += ["--seed", str(kw.get("seed", 42)), "--log-dir", str(kw["log_dir"]), "--run-name", kw["run_name"]]
    return command


def launch(
    opts: Options,
    task: str,
    label: str,
    nproc: int,
    num_envs: int,
    iterations: int,
    *,
    seed: int = 42,
    stop_at_return: float | None = None,
    timeout_s: float = 600.0,
) -> LaunchResult:
    """Run ``islab-train`` once with the probe on PYTHONPATH; stop early once ``stop_at_return``
    is logged (SIGTERM to the launcher, which forwards it to the ranks)."""
    with LAUNCH_LOCK:  # concurrent launches (the machine-ceiling runs) need distinct names
        opts.launch_counter += 1
        run_name = f"bench{opts.launch_counter}"
    log_dir = Path(opts.work_dir) / "logs"
    timings_dir = Path(opts.work_dir) / "timings" / run_name
    command = launch_command(
        opts, task, label, nproc, num_envs, iterations, seed=seed, log_dir=log_dir, run_name=run_name
    )
    shown = ["islab-train", *command[len(islab_train()) :]]
    shown[shown.index("--log-dir") + 1] = "<work-dir>/logs"
    opts.commands.setdefault(f"train {task} {label} nproc={nproc} envs={num_envs}", " ".join(shown))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOKS), env.get("PYTHONPATH", "")) if p)
    env["ISLAB_BENCH_TIMINGS"] = str(timings_dir)
    env["ISLAB_THREADS_PER_RANK"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    log_path = Path(opts.work_dir) / f"{run_name}.log"
    started = time.perf_counter()
    run_dir: Path | None = None
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=opts.work_dir)
        stopped = False
        while process.poll() is None:
            time.sleep(0.25)
            if run_dir is None:
                found = sorted((log_dir / LIBS[label][0] / task).glob(f"*_{run_name}"))
                run_dir = found[-1] if found else None
            elapsed = time.perf_counter() - started
            reached = (
                stop_at_return is not None
                and run_dir is not None
                and any((r.get("mean_return") or -1e9) >= stop_at_return for r in read_progress(run_dir))
            )
            if (reached or elapsed > timeout_s) and not stopped:
                process.send_signal(signal.SIGTERM)  # our child; the launcher forwards it to its ranks
                stopped = True
                stop_time = time.perf_counter()
            if stopped and time.perf_counter() - stop_time > 30:
                process.kill()
                break
        returncode = process.wait()
    wall = time.perf_counter() - started
    if run_dir is None:
        found = sorted((log_dir / LIBS[label][0] / task).glob(f"*_{run_name}"))
        run_dir = found[-1] if found else None
    result = LaunchResult(label, nproc, num_envs, returncode, wall, str(run_dir) if run_dir else None)
    if run_dir is not None:
        result.progress = read_progress(run_dir)
    for path in timings_dir.glob("rank_*.json"):
        data = json.loads(path.read_text())
        result.timings[int(data["rank"])] = data
    result.log = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
    if returncode != 0 and not (stop_at_return is not None and stopped):
        print(f"[bench] {task} {label} nproc={nproc} exited {returncode}; log tail:\n{result.log}", file=sys.stderr)
    return result


def launch_independent(
    opts: Options, task: str, label: str, copies: int, num_envs: int, iterations: int
) -> list[LaunchResult]:
    """``copies`` separate 1-rank jobs at the same time: no process group, no collective, so their
    total throughput / (copies x one alone) is what this machine allows n ranks at best."""
    with ThreadPoolExecutor(max_workers=copies) as pool:
        futures = [pool.submit(launch, opts, task, label, 1, num_envs, iterations) for _ in range(copies)]
        return [f.result() for f in futures]


def gloo_latency(opts: Options) -> dict[str, Any] | None:
    """The transport's own cost per collective on this machine: ``scripts/bench_allreduce.py``."""
    out = Path(opts.work_dir) / "allreduce.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(opts.scale_nproc)]
    command += ["--standalone", str(ROOT / "scripts" / "bench_allreduce.py"), str(out)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=opts.work_dir)
    if completed.returncode != 0 or not out.exists():
        print(f"[bench] all_reduce latency failed:\n{completed.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.read_text())


def run_training_sections(opts: Options) -> dict[str, Any]:
    """Sections 2-4: for each run, for each task and library, 1 rank, then n ranks, then n
    independent 1-rank jobs at once (the machine's ceiling for scaling), interleaved."""
    from islab.tasks import libraries_with_agent_config

    n = opts.scale_nproc
    out: dict[str, Any] = {"nproc": n, "tasks": {}}
    if opts.device == "cpu":
        out["gloo_latency"] = gloo_latency(opts)
    plan: dict[str, list[str]] = {}
    for task in opts.tasks:
        configured = libraries_with_agent_config(task)
        plan[task] = [lib for lib in opts.libs if LIBS[lib][0] in configured]
        for lib in sorted(set(opts.libs) - set(plan[task])):
            print(f"[bench] skip training {task} with {lib}: the task has no agent config for it", file=sys.stderr)
    raw: dict[tuple[str, str], dict[int, list[LaunchResult]]] = {
        (task, lib): {1: [], n: []} for task, libs in plan.items() for lib in libs
    }
    independent: dict[tuple[str, str], list[list[LaunchResult]]] = {key: [] for key in raw}
    for run in range(opts.train_runs):
        for task, libs in plan.items():
            envs = opts.scale(task).train_envs
            for lib in libs:
                warmup, measured = opts.iterations[lib]
                for nproc in (1, n):
                    what = f"{task} {lib} x{nproc} rank(s)"
                    print(f"[bench] train run {run + 1}/{opts.train_runs}: {what}", file=sys.stderr)
                    raw[task, lib][nproc].append(launch(opts, task, lib, nproc, envs, warmup + measured))
                if opts.device == "cpu":
                    what = f"{task} {lib} {n} independent 1-rank jobs"
                    print(f"[bench] train run {run + 1}/{opts.train_runs}: {what}", file=sys.stderr)
                    group = launch_independent(opts, task, lib, n, envs, warmup + measured)
                    independent[task, lib].append(group)
    for task, libs in plan.items():
        out["tasks"][task] = {
            "num_envs": opts.scale(task).train_envs,
            "libs": {
                lib: summarize_training(
                    raw[task, lib][1], raw[task, lib][n], independent[task, lib], n, opts.iterations[lib]
                )
                for lib in libs
            },
        }
    return out


def summarize_training(
    one: list[LaunchResult],
    many: list[LaunchResult],
    independent: list[list[LaunchResult]],
    n: int,
    iterations: tuple[int, int],
) -> dict[str, Any]:
    """One (task, library)'s numbers from its 1-rank, n-rank and independent launches."""
    warmup, measured = iterations
    sps1 = [r.steps_per_s(warmup) for r in one]
    spsn = [r.steps_per_s(warmup) for r in many]
    paired = [a / (n * b) if a and b else None for a, b in zip(spsn, sps1, strict=True)]
    sps_independent = [
        sum(rates) if None not in (rates := [r.steps_per_s(warmup) for r in group]) else None for group in independent
    ]
    ceiling = [a / (n * b) if a and b else None for a, b in zip(sps_independent, sps1, strict=False)]
    calls = [c for r in many if (c := r.collective_calls(warmup, 0)) is not None]
    return {
        "warmup_iterations": warmup,
        "measured_iterations": measured,
        "steps_per_s_1rank": sps1,
        "steps_per_s_nrank": spsn,
        "env_share_1rank": [r.share("env_step", warmup) for r in one],
        "env_share_nrank": [r.share("env_step", warmup) for r in many],
        "sync_share_rank0": [r.share("collective", warmup, 0) for r in many],
        "sync_share_rank1": [r.share("collective", warmup, 1) for r in many],
        "steps_per_s_independent": sps_independent,
        "machine_ceiling": ceiling,
        "returncodes": [r.returncode for r in one + many + [r for g in independent for r in g]],
        # what these launches cost in wall time (the independent jobs of a group run at once)
        "launch_wall_s": sum(r.wall_s for r in one + many) + sum(max(r.wall_s for r in g) for g in independent if g),
        "median": {
            "steps_per_s_1rank": median(sps1),
            "steps_per_s_nrank": median(spsn),
            "scaling": (median(spsn) / (n * median(sps1))) if median(spsn) and median(sps1) else None,
            "scaling_paired": median(paired),
            "machine_ceiling": median(ceiling),
            "scaling_of_ceiling": (median(paired) / median(ceiling) if median(paired) and median(ceiling) else None),
            "env_share_1rank": median(r.share("env_step", warmup) for r in one),
            "env_share_nrank": median(r.share("env_step", warmup) for r in many),
            "sync_share": median(_worst_rank_share(r, warmup) for r in many),
            "sync_floor_share": median(_worst(r.sync_floor(warmup, k) for k in r.timings) for r in many),
            "collective_calls_per_iteration": median(c[0] for c in calls),
            "collective_call_s": median(c[1] for c in calls),
            "cpu_use_1rank": median(r.cpu_use(warmup, 0) for r in one),
            "cpu_use_nrank": median(
                statistics.mean(x) if (x := [v for k in r.timings if (v := r.cpu_use(warmup, k)) is not None]) else None
                for r in many
            ),
        },
    }


def run_time_to_solve(opts: Options) -> dict[str, Any]:
    """Section 5: A = 1 x n, B = 2 x n (weak vs A), C = 1 x 2n (strong: B splits C's envs)."""
    n, lib = opts.tts_envs, opts.tts_lib
    configs = {"1 rank x n": (1, n), f"{opts.scale_nproc} ranks x n": (opts.scale_nproc, n)}
    configs[f"1 rank x {opts.scale_nproc}n"] = (1, opts.scale_nproc * n)
    times: dict[str, list[float | None]] = {k: [] for k in configs}
    iterations: dict[str, list[int | None]] = {k: [] for k in configs}
    for run in range(opts.tts_runs):
        for name, (nproc, envs) in configs.items():
            print(f"[bench] time-to-solve run {run + 1}/{opts.tts_runs}: {name}", file=sys.stderr)
            result = launch(
                opts,
                CARTPOLE,
                lib,
                nproc,
                envs,
                opts.tts_max_iterations,
                seed=100 + run,
                stop_at_return=SOLVED_RETURN,
                timeout_s=opts.tts_timeout_s,
            )
            solved = result.time_to_return(SOLVED_RETURN)
            times[name].append(solved)
            iterations[name].append(
                next((r["iteration"] for r in result.progress if (r.get("mean_return") or -1e9) >= SOLVED_RETURN), None)
            )
    a, b, c = (median(times[k]) for k in configs)
    return {
        "lib": lib,
        "envs_per_rank": n,
        "threshold": SOLVED_RETURN,
        "max_iterations": opts.tts_max_iterations,
        "configs": {k: {"nproc": v[0], "num_envs": v[1]} for k, v in configs.items()},
        "time_s": times,
        "iterations": iterations,
        "median_time_s": {k: median(v) for k, v in times.items()},
        "weak_ratio": b / a if a and b else None,
        "strong_ratio": b / c if b and c else None,
    }


# --------------------------------------------------------------------------------------------
# 6: command-line latency


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


# --------------------------------------------------------------------------------------------
# options and report


@dataclass
class Options:
    device: str
    runs: int
    train_runs: int
    tts_runs: int
    compile: bool
    libs: list[str]
    scale_nproc: int
    iterations: dict[str, tuple[int, int]]
    tts_lib: str
    tts_envs: int
    tts_max_iterations: int
    tts_timeout_s: float
    sections: list[str]
    tasks: list[str] = field(default_factory=lambda: [CARTPOLE])  # runnable ones (skipped: meta)
    sync_envs: int = 4096
    work_dir: str = ""
    quick: bool = False
    launch_counter: int = 0
    commands: dict[str, str] = field(default_factory=dict)

    def scale(self, task: str) -> TaskScale:
        """``task``'s sizes (:data:`TASK_SCALES`) for this run: quick, cpu or cuda."""
        from islab.tasks import TASKS

        by_mode = TASK_SCALES.get(TASKS[task].extra, TASK_SCALES[""])
        return by_mode["quick" if self.quick else self.device]


def build_options(args: argparse.Namespace) -> Options:
    cuda = args.device == "cuda"
    if args.quick:
        opts = Options(
            device=args.device,
            runs=args.runs or 1,
            train_runs=args.runs or 1,
            tts_runs=1,
            compile=args.compile is True,
            libs=args.libs or ["rsl_rl"],
            scale_nproc=2,
            iterations={k: (1, 2) for k in LIBS},
            tts_lib="rsl_rl",
            tts_envs=64,
            tts_max_iterations=2,
            tts_timeout_s=120,
            sections=args.sections or list(SECTIONS),
            quick=True,
        )
    else:
        gpus = 1
        if cuda:
            import torch

            gpus = max(1, torch.cuda.device_count())
        opts = Options(
            device=args.device,
            runs=args.runs or 5,
            train_runs=args.train_runs or 3,
            tts_runs=args.tts_runs or 2,
            compile=args.compile is not False,
            libs=args.libs or list(LIBS),
            scale_nproc=gpus if cuda else 2,
            iterations=dict(ITERATIONS),
            tts_lib="rsl_rl",
            tts_envs=args.tts_envs or 4096,
            tts_max_iterations=150,
            tts_timeout_s=180,
            sections=args.sections or (["env", "train", "cli"] if cuda and gpus < 2 else list(SECTIONS)),
        )
    return opts


def resolve_tasks(values: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``--tasks`` (comma- or space-separated ids) -> (tasks to run, {skipped task: why}). A task
    whose extra is not installed (mjlab's) is skipped, not an error: the rest of the report stands.
    Raises ValueError with ``<field>: <problem>. <fix>.`` for an unknown id."""
    from islab.tasks import TASKS, missing_extra

    names = list(dict.fromkeys(name.strip() for value in values for name in value.split(",") if name.strip()))
    if not names:
        raise ValueError(f"tasks: no task given. Pass e.g. --tasks {CARTPOLE}.")
    for name in names:
        if name not in TASKS:
            raise ValueError(f"tasks: unknown task {name!r}. Use one of: {', '.join(sorted(TASKS))}.")
    runnable: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        extra = missing_extra(name)
        if extra:
            skipped[name] = f"needs the [{extra}] extra ({extra} is not importable): pip install 'islab-train[{extra}]'"
        else:
            runnable.append(name)
    return runnable, skipped


def render_env(add: Callable[[str], None], tasks: dict[str, dict[str, Any]]) -> None:
    """Section 1: one table, a row per (task, num_envs); gymnasium only beside Cartpole."""
    add("## 1. Environment step throughput (env steps/s, 1 thread, random actions)")
    add("")
    variants = [v for v in ("gymnasium", "eager", "compiled") if any(v in t["variants"] for t in tasks.values())]
    ratios = [v for v in variants if v != "gymnasium" and any("ratio_vs_gym_paired" in t for t in tasks.values())]
    head = ["task", "num_envs", *variants, *(f"{v} / gymnasium" for v in ratios)]
    add("| " + " | ".join(head) + " |")
    add("|" + "---|" * len(head))
    goal = GOALS["env_vs_gym_4096"]
    for task, env in tasks.items():
        for size in env["sizes"]:
            s = str(size)
            row = [task, s] + [fmt_rate(env["median"][v][s]) if v in env["median"] else "-" for v in variants]
            for v in ratios:
                ratio = env.get("ratio_vs_gym_paired", {}).get(v, {}).get(s)
                cell = fmt(ratio, 2, "x") if ratio is not None else "-"
                if ratio is not None and size == 4096:
                    cell += f" (goal >= {goal}x: {verdict(ratio, goal, True)})"
                row.append(cell)
            add("| " + " | ".join(row) + " |")
    add("")
    add(
        "Variants: `eager` = the default step; "
        "`compiled` = `ISLAB_ENV_COMPILE=1` (torch.compile fused kernel; only tasks that have one, `-` elsewhere). "
        "gymnasium's numpy CartPole runs beside Cartpole only. Ratios are medians of the "
        "per-run ratios (runs interleaved). Ours does 2 physics substeps per step, gymnasium 1."
    )
    for task, env in tasks.items():
        if env.get("compile_s"):
            add(
                f"First compiled call of {task} (compile, using whatever /tmp/torchinductor_* cache exists): "
                + ", ".join(f"{k} envs {v:.1f} s" for k, v in env["compile_s"].items())
                + "."
            )
    first = next(iter(tasks.values()))
    add(
        f"BLAS seen by numpy (threadpoolctl): {first['blas']}; removed from the child's environment: "
        f"{first['openblas_variables_removed'] or 'nothing (not set)'}."
    )
    add("")


def render_markdown(report: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    meta = report["meta"]
    add("# islab-train benchmarks")
    add("")
    add(f"Generated by `{meta['command']}` on {meta['date']} ({'quick smoke run' if meta['quick'] else 'full run'}).")
    add("How each number is measured, and why that way: the docstring of `scripts/bench.py`.")
    add("")
    add("## Machine and versions")
    add("")
    m = meta["machine"]
    add(f"- CPU: {m.get('cpu')}, {m.get('cores')} logical cores, {m.get('memory_gib', '?')} GiB; {m.get('platform')}")
    add(f"- device: {meta['device']}")
    add(f"- tasks (sections 1-4): {', '.join(meta['tasks']) or 'none'}")
    for task, why in meta["skipped_tasks"].items():
        add(f"- skipped task {task}: {why}")
    add(f"- load average (1/5/15 min) at start {meta['load_start']}, at end {meta['load_end']}")
    if meta.get("shared_note"):
        add(f"- {meta['shared_note']}")
    add("- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    add(
        f"- runs per number: {meta['runs']} (env, CLI), {meta['train_runs']} (training), "
        f"{meta['tts_runs']} (time to solve)"
    )
    add(f"- elapsed: {meta.get('elapsed_s', 0):.0f} s")
    add("")

    env = report.get("env")
    if env and env["tasks"]:
        render_env(add, env["tasks"])

    train = report.get("train")
    if train:
        n = train["nproc"]
        add("## 2-4. Training throughput, env share, scaling, gradient-sync share")
        add("")
        add(
            "| task | library | envs per rank | 1 rank steps/s | "
            f"env share (goal < {GOALS['env_share']:.0%}) | {n} ranks steps/s | "
            f"scaling efficiency (goal >= {GOALS['scaling']}) | machine ceiling | scaling / ceiling | "
            f"sync share at {n} ranks (goal < {GOALS['sync_share']:.0%}) | of which transfer (floor) | "
            "collectives per iteration | median collective | "
            f"CPU use per rank, 1 / {n} ranks |"
        )
        add("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        rows = [
            (task, t["num_envs"], lib, data) for task, t in train["tasks"].items() for lib, data in t["libs"].items()
        ]
        for task, envs, lib, data in rows:
            med = data["median"]
            scaling_goal = "" if lib == "skrl-jax" else f" ({verdict(med['scaling_paired'], GOALS['scaling'], True)})"
            add(
                f"| {task} | {lib} | {envs} | {fmt_rate(med['steps_per_s_1rank'])} | "
                f"{fmt(_pct(med['env_share_1rank']), 1, '%')} "
                f"({verdict(med['env_share_1rank'], GOALS['env_share'], False)}) | "
                f"{fmt_rate(med['steps_per_s_nrank'])} | "
                f"{fmt(med['scaling_paired'], 3)}{scaling_goal} | {fmt(med.get('machine_ceiling'), 3)} | "
                f"{fmt(med.get('scaling_of_ceiling'), 3)} | {fmt(_pct(med['sync_share']), 1, '%')} "
                f"({verdict(med['sync_share'], GOALS['sync_share'], False)}) | "
                f"{fmt(_pct(med.get('sync_floor_share')), 1, '%')} | "
                f"{fmt(med.get('collective_calls_per_iteration'), 0)} | "
                f"{fmt(_us(med.get('collective_call_s')), 0, ' µs')} | "
                f"{fmt(med.get('cpu_use_1rank'))} / {fmt(med.get('cpu_use_nrank'))} |"
            )
        add("")
        add(
            "Steps/s: all ranks together, from `progress.jsonl` after the warm-up iterations "
            "("
            + ", ".join(
                f"{lib}: skip {data['warmup_iterations']}, measure {data['measured_iterations']}"
                for lib, data in {lib: data for _, _, lib, data in rows}.items()
            )
            + "). "
            "Env share: time inside `env.step` / iteration time on rank 0, 1 rank. Scaling: median over runs of "
            f"steps/s({n} ranks) / ({n} x steps/s(1 rank)), each pair run back to back. "
            "Machine ceiling: the same median for "
            f"{n} independent 1-rank jobs started together (no process group, nothing shared): the most {n} ranks "
            "can get from this machine, whatever the library does; scaling / ceiling is the part the distributed "
            "training itself loses. Sync share: time inside "
            "collectives / iteration time, the larger of the two ranks (skrl-JAX: its gradient reduce and parameter "
            "broadcast only); it includes waiting for the slower rank. Transfer floor: per kind of collective, "
            "number of calls x the fastest call, / iteration time: what the collectives would cost if the ranks "
            "arrived together; the rest of the sync share is waiting. Collectives per iteration and the median "
            "time of one (rank 0): on this kind of machine a gloo call costs far more than its bytes "
            "(see below), so the count a library makes per iteration sets its sync share. "
            "CPU use: CPU time / wall time per rank over "
            "the measured iterations (1.00 = a whole core; below that the rank waited or was not scheduled). "
            "`ISLAB_THREADS_PER_RANK=1`."
        )
        add("")
        latency = train.get("gloo_latency")
        if latency:
            sizes = ", ".join(
                f"{int(size):,} float(s): {1e6 * v['median_s']:.0f} µs (fastest {1e6 * v['min_s']:.0f} µs)"
                for size, v in latency["floats"].items()
            )
            add(
                f"One gloo all_reduce between {latency['world_size']} CPU ranks on this machine, back to back "
                f"(`scripts/bench_allreduce.py`), median: {sizes}. The size hardly matters: the cost is the "
                "messages and the wake-ups of the waiting thread, so a library's sync share follows the number "
                "of collectives it makes per iteration."
            )
            add("")

    if report.get("sync"):
        render_sync(add, report["sync"])

    tts = report.get("tts")
    if tts:
        add(f"## 5. Time to solve ({tts['lib']}, mean episode return >= {tts['threshold']:.0f})")
        add("")
        add("| configuration | total envs | training time to solve (median) | iterations | runs (s) |")
        add("|---|---|---|---|---|")
        for name, cfg in tts["configs"].items():
            runs = ", ".join("not reached" if t is None else f"{t:.1f}" for t in tts["time_s"][name])
            its = ", ".join("-" if i is None else str(i) for i in tts["iterations"][name])
            add(
                f"| {name} (n={tts['envs_per_rank']}) | "
                f"{cfg['nproc'] * cfg['num_envs']} | {fmt(tts['median_time_s'][name], 1, ' s')} | {its} | {runs} |"
            )
        add("")
        add(
            f"Weak scaling (2 ranks x n vs 1 rank x n): time ratio {fmt(tts['weak_ratio'])}. "
            f"Strong scaling (2 ranks x n vs 1 rank x 2n, same total envs): time ratio {fmt(tts['strong_ratio'])} "
            f"(goal <= {GOALS['strong_tts_ratio']}: {verdict(tts['strong_ratio'], GOALS['strong_tts_ratio'], False)}). "
            "Time is training time (`time_s` in progress.jsonl), process start-up excluded. `--max-iterations` is "
            "per run: every rank does that many updates, so adding ranks (weak scaling) adds samples per update "
            "and total samples; only strong scaling keeps the sample budget fixed. `--total-env-steps N` keeps "
            "it fixed for any number of ranks (iterations = ceil(N / (world size x num_envs x rollout length)))."
        )
        add("")

    cli = report.get("cli")
    if cli:
        add("## 6. Command-line latency")
        add("")
        add("| command | median wall time |")
        add("|---|---|")
        add(f"| `{meta['commands'].get('cli dry-run')}` | {fmt(cli['median_s']['dry_run'], 3, ' s')} |")
        add(f'| `python -c "import torch"` | {fmt(cli["median_s"]["import_torch"], 3, " s")} |')
        add(
            f"| ratio (median of paired runs) | {fmt(cli['ratio_paired'], 3)} (goal <= {GOALS['cli_ratio']}: "
            f"{verdict(cli['ratio_paired'], GOALS['cli_ratio'], False)}) |"
        )
        add("")

    add("## 7. GPU")
    add("")
    if meta["device"] == "cuda":
        add("The sections above ran on CUDA (NCCL between ranks); the env table's largest size is the 1e9 goal's.")
        add(f"Reference: {ISAAC_LAB_PUBLISHED}.")
    else:
        add("No GPU on the machine that produced this report. On a GPU machine run:")
        add("")
        add("    python scripts/bench.py --device cuda --out docs/benchmarks-gpu.md --json docs/benchmarks-gpu.json")
        add("")
        add(
            "It measures env steps/s at 4096, 16384, 65536 and 262144 envs on cuda (eager and compiled; goal "
            f">= {GOALS['gpu_env_steps']:.0e} env steps/s at 262144), and training steps/s per library at 4096 envs "
            "per GPU, 1 GPU and all visible GPUs over NCCL (`islab-train --gpus N`), to set beside "
            f"{ISAAC_LAB_PUBLISHED}."
        )
    add("")
    add("## Commands")
    add("")
    for name, command in meta["commands"].items():
        add(f"- {name}: `{command}`")
    add("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# 8: stock vs fused gradient/KL/normalizer sync (issue 13), side by side in one run


def updates_per_iteration(label: str, num_envs: int) -> int:
    """Optimizer updates (minibatches) per training iteration of ``label``'s Cartpole config."""
    from islab.agent_config import load_agent_config
    from islab.budget import rollout_length

    lib = LIBS[label][0]
    cfg = load_agent_config(lib, CARTPOLE)
    if lib == "rsl_rl":
        return int(cfg["algorithm"]["num_learning_epochs"]) * int(cfg["algorithm"]["num_mini_batches"])
    if lib == "rl_games":
        from islab.libs.rl_games import fit_minibatch_size

        config = cfg["params"]["config"]
        batch = num_envs * rollout_length(lib, cfg)
        return int(config["mini_epochs"]) * (batch // fit_minibatch_size(int(config["minibatch_size"]), batch))
    return int(cfg["agent"]["learning_epochs"]) * int(cfg["agent"]["mini_batches"])


@contextlib.contextmanager
def sync_mode(mode: str) -> Any:
    """``ISLAB_SYNC`` for the launches inside the block (launch() copies os.environ)."""
    previous = os.environ.get("ISLAB_SYNC")
    os.environ["ISLAB_SYNC"] = mode
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("ISLAB_SYNC", None)
        else:
            os.environ["ISLAB_SYNC"] = previous


def run_sync_section(opts: Options) -> dict[str, Any]:
    """Per library and run: 1 rank, n ranks with ``ISLAB_SYNC=stock``, n ranks with
    ``ISLAB_SYNC=fused``, and n independent 1-rank jobs (the machine ceiling), back to back."""
    n, envs = opts.scale_nproc, opts.sync_envs
    modes = ("stock", "fused")
    out: dict[str, Any] = {"libs": {}, "num_envs": envs, "nproc": n}
    for lib in opts.libs:
        warmup, measured = opts.iterations[lib]
        one: list[LaunchResult] = []
        many: dict[str, list[LaunchResult]] = {m: [] for m in modes}
        ceiling: list[float | None] = []
        for run in range(opts.train_runs):
            print(f"[bench] sync run {run + 1}/{opts.train_runs}: {lib} 1 rank, {n} ranks stock/fused", file=sys.stderr)
            one.append(launch(opts, CARTPOLE, lib, 1, envs, warmup + measured))
            for mode in modes if run % 2 == 0 else modes[::-1]:
                with sync_mode(mode):
                    many[mode].append(launch(opts, CARTPOLE, lib, n, envs, warmup + measured))
            if opts.device == "cpu":
                group = launch_independent(opts, CARTPOLE, lib, n, envs, warmup + measured)
                rates = [r.steps_per_s(warmup) for r in group]
                alone = one[-1].steps_per_s(warmup)
                ceiling.append(sum(rates) / (n * alone) if None not in rates and alone else None)
        sps1 = [r.steps_per_s(warmup) for r in one]
        row: dict[str, Any] = {
            "updates_per_iteration": updates_per_iteration(lib, envs),
            "machine_ceiling": median(ceiling),
        }
        for mode in modes:
            runs = many[mode]
            spsn = [r.steps_per_s(warmup) for r in runs]
            scaling = [a / (n * b) if a and b else None for a, b in zip(spsn, sps1, strict=True)]
            calls = [c for r in runs if (c := r.collective_calls(warmup, 0)) is not None]
            row[mode] = {
                "steps_per_s": median(r.steps_per_s(warmup) for r in runs),
                "collectives_per_iteration": median(c[0] for c in calls),
                "sync_share": median(_worst_rank_share(r, warmup) for r in runs),
                "scaling": median(scaling),
                "scaling_of_ceiling": (
                    median(scaling) / median(ceiling) if median(scaling) and median(ceiling) else None
                ),
                "returncodes": [r.returncode for r in runs],
            }
        row["steps_per_s_1rank"] = median(sps1)
        out["libs"][lib] = row
    return out


SYNC_GOALS = {"rsl_rl": 0.95, "skrl-torch": 0.95, "rl_games": 0.90, "skrl-jax": 0.90}


def render_sync(add: Callable[[str], None], sync: dict[str, Any]) -> None:
    n = sync["nproc"]
    add(f"## 8. Stock vs fused sync ({sync['num_envs']} envs per rank, {n} ranks; `ISLAB_SYNC=stock|fused`)")
    add("")
    add(
        "| library | updates per iteration | collectives per iteration, stock / fused (goal <= updates + 2) | "
        f"sync share, stock / fused | {n}-rank steps/s, stock / fused | scaling, stock / fused | machine ceiling | "
        "scaling / ceiling, stock / fused (goal) |"
    )
    add("|---|---|---|---|---|---|---|---|")
    for lib, row in sync["libs"].items():
        st, fu = row["stock"], row["fused"]
        updates = row["updates_per_iteration"]
        goal = SYNC_GOALS.get(lib, 0.95)
        count_ok = verdict(fu["collectives_per_iteration"], updates + 2, False)
        add(
            f"| {lib} | {updates} | {fmt(st['collectives_per_iteration'], 0)} / "
            f"{fmt(fu['collectives_per_iteration'], 0)} ({count_ok}) | "
            f"{fmt(_pct(st['sync_share']), 1, '%')} / {fmt(_pct(fu['sync_share']), 1, '%')} | "
            f"{fmt_rate(st['steps_per_s'])} / {fmt_rate(fu['steps_per_s'])} | "
            f"{fmt(st['scaling'], 3)} / {fmt(fu['scaling'], 3)} | {fmt(row['machine_ceiling'], 3)} | "
            f"{fmt(st['scaling_of_ceiling'], 3)} / {fmt(fu['scaling_of_ceiling'], 3)} "
            f"(>= {goal}: {verdict(fu['scaling_of_ceiling'], goal, True)}) |"
        )
    add("")
    add(
        "Same launches as sections 2-4, with `ISLAB_SYNC=stock` (each library's own collectives plus islab's "
        "normalizer sync) and `ISLAB_SYNC=fused` (the default: gradients, KL and learning-rate agreement in one "
        "all-reduce per optimizer update; the normalizer statistics of an iteration in one more; "
        "`src/islab/libs/fused_sync.py`), run back to back in alternating order. Collectives per iteration: every "
        "torch.distributed call, and for skrl-JAX every call of islab's cached psum / all_gather pmaps, on rank 0 "
        "per measured iteration. Scaling: steps/s(n ranks) / (n x steps/s(1 rank)) of the same run; the machine "
        "ceiling as in section 3."
    )
    add("")


def _worst(values: Iterable[float | None]) -> float | None:
    kept = [x for x in values if x is not None]
    return max(kept) if kept else None


def _worst_rank_share(result: LaunchResult, warmup: int) -> float | None:
    return _worst(result.share("collective", warmup, rank) for rank in result.timings)


def _us(value: float | None) -> float | None:
    return None if value is None else 1e6 * value


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


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
