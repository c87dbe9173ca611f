"""What every part of ``scripts/bench.py`` shares: constants, sizes, small helpers, the options.

What each section measures, and why that way: the docstring of ``scripts/bench.py``."""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench.py"  # the entry point; the env section re-runs it as its child
HOOKS = ROOT / "scripts" / "bench_hooks"
CARTPOLE = "Islab-Cartpole-v0"  # the default task; gymnasium's CartPole, time to solve and sync use it
SOLVED_RETURN = 270.0  # Cartpole's return (section 5)
SECTIONS = ("env", "train", "sync", "tts", "cli", "launch")

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
    "look_around_s": 2.0,  # --help, tasks, doctor (section 6)
    "launch_overhead_s": 0.5,  # islab-train minus the bare torchrun it plans (section 6b)
    "gpu_env_steps": 1e9,
}
# section 8: the goal of scaling / machine ceiling with fused sync, per library
SYNC_GOALS = {"rsl_rl": 0.95, "skrl-torch": 0.95, "rl_games": 0.90, "skrl-jax": 0.90}


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
# options


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
        by_mode = TASK_SCALES.get(extra_of(task), TASK_SCALES[""])
        return by_mode["quick" if self.quick else self.device]


def extra_of(task: str) -> str:
    """The extra ``task`` needs ("" for our own batched-torch tasks; "mjlab" for mjlab's robots)."""
    from islab.tasks import TASKS

    return TASKS[task].extra


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
            skipped[name] = f'needs the [{extra}] extra ({extra} is not importable): pip install -e ".[{extra}]"'
        else:
            runnable.append(name)
    return runnable, skipped
