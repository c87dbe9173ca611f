"""Sections 1 and 7a: env step throughput, in a child process per task (``bench.py --env-child``):
clean BLAS variables, one thread."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import CARTPOLE, ROOT, SCRIPT, Options, median


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

    from islab.envs import load_entry_point, make_env

    task, device, sizes = config["task"], config["device"], config["sizes"]
    runs, target = config["runs"], config["target_env_steps"]
    # The task's action size, from the env itself (a registration need not spell it out); building it
    # also registers the task with gymnasium, as a rank does.
    sizing_env = make_env(task, 1, device, seed=0)
    action_size = int(sizing_env.single_action_space.shape[0])
    sizing_env.close()
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
        bank = torch.rand(8, size, action_size, device=device) * 2 - 1
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
        command = [sys.executable, str(SCRIPT), "--env-child", str(config_path), str(out_path)]
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
