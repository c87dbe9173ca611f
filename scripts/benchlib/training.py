"""Sections 2-5 and 7b: training through the real launcher (``islab-train``), with the probe of
``scripts/bench_hooks`` in every rank."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islab.rundir import read_progress

from .common import CARTPOLE, HOOKS, LIBS, ROOT, SOLVED_RETURN, Options, islab_train, median

LAUNCH_LOCK = threading.Lock()


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
            "sync_share": median(worst_rank_share(r, warmup) for r in many),
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


def _worst(values: Iterable[float | None]) -> float | None:
    kept = [x for x in values if x is not None]
    return max(kept) if kept else None


def worst_rank_share(result: LaunchResult, warmup: int) -> float | None:
    return _worst(result.share("collective", warmup, rank) for rank in result.timings)
