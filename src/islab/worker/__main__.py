"""The per-rank training entry point: ``python -m islab.worker`` (or this file's path for skrl-JAX).

Every rank of a job runs this same program; only its environment variables differ. The flow,
top to bottom, is the whole story of a rank:

    args            what the launcher decided for the whole job (identical on every rank)
    RankContext     who this rank is: global rank, device, backend, seed
    run directory   chosen by the launcher; this rank tees its output to logs/rank_<R>.log
    process group   gloo on CPU / NCCL on GPU (torchrun jobs; skrl-JAX joins jax.distributed)
    env             ONE batched environment of num_envs on this rank's device, seeded per rank
    adapter         ONE policy, trained by the chosen library; gradients averaged across ranks
    results         policy digest per rank (to prove every rank holds the same policy), summary

``@record`` makes an exception's traceback reach torchrun's failure summary instead of being lost.
This file uses absolute imports only, because skrl's JAX launcher runs it as a script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from islab.agent_config import AgentConfigError, load_agent_config
from islab.tasks import LIBRARIES, TASKS
from islab.worker.faults import maybe_inject_fault


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m islab.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=LIBRARIES, required=True)
    parser.add_argument("--ml-framework", choices=("torch", "jax"), default="torch")
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--num-envs", type=int, required=True, help="environments on this rank")
    parser.add_argument("--seed", type=int, default=42, help="base seed; each rank adds its global rank")
    parser.add_argument("--max-iterations", type=int, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--distributed", action="store_true", help="train across all ranks of the job")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="agent-config overrides")
    args = parser.parse_args(argv)
    if args.ml_framework == "jax" and args.lib != "skrl":
        parser.error("--ml-framework jax is only available with --lib skrl")
    return args


class Tee:
    """Write to the console and to this rank's log file; the log gets everything, always."""

    def __init__(self, console: TextIO, log: TextIO) -> None:
        self.console, self.log = console, log

    def write(self, text: str) -> int:
        self.log.write(text)
        self.log.flush()
        return self.console.write(text)

    def flush(self) -> None:
        self.log.flush()
        self.console.flush()

    def isatty(self) -> bool:
        return self.console.isatty()

    def fileno(self) -> int:
        return self.console.fileno()


def tee_output(log_path: Path) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 -- lives as long as the process
    sys.stdout = Tee(sys.stdout, log)
    sys.stderr = Tee(sys.stderr, log)


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.ml_framework == "jax":
        # JAX would otherwise pre-allocate ~75% of GPU memory and starve the torch env beside it.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        if args.device == "cpu":
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # rsl_rl imports GitPython; no git binary is fine

    # torch is imported only now: argument errors above stay instant.
    from islab.envs import make_env
    from islab.libs import load_adapter
    from islab.libs.base import state_digest
    from islab.worker.context import RankContext, configure_process, init_process_group

    ctx = RankContext.from_environ(args.device, args.seed)
    run_dir: Path = args.run_dir
    tee_output(run_dir / "logs" / f"rank_{ctx.rank}.log")
    print(
        f"[islab] rank {ctx.rank}/{ctx.world_size} (local {ctx.local_rank}) on {ctx.device} "
        f"backend={ctx.backend} seed={ctx.seed} launcher={ctx.launcher} pid={os.getpid()}",
        flush=True,
    )
    maybe_inject_fault(ctx.rank, run_dir, iteration=None)
    if ctx.distributed and not args.distributed:
        raise SystemExit(
            f"error: this rank is one of {ctx.world_size} (launched by {ctx.launcher}) but --distributed "
            "was not given; without it every rank would train alone. Add --distributed."
        )

    configure_process(ctx)
    init_process_group(ctx)
    agent_cfg = load_agent_config(args.lib, args.task, args.overrides)
    if ctx.is_main:
        spec = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
        spec["world_size"] = ctx.world_size
        write_yaml(run_dir / "spec.yaml", spec)
        write_yaml(run_dir / "agent.yaml", agent_cfg)

    env = make_env(args.task, args.num_envs, ctx.device, seed=ctx.seed)
    adapter = load_adapter(args.lib, args.ml_framework)(ctx, env, agent_cfg, run_dir)
    started = time.perf_counter()
    result = adapter.train(args.max_iterations)
    print(
        f"[islab] rank {ctx.rank} finished {result.iterations} iterations, {result.env_steps} env steps "
        f"in {time.perf_counter() - started:.1f} s, mean return {result.mean_return}",
        flush=True,
    )

    digest = state_digest(adapter.policy_state())
    write_json(run_dir / "digests" / f"rank_{ctx.rank}.json", {"rank": ctx.rank, "policy_sha256": digest})
    summary = {**result.to_dict(), "world_size": ctx.world_size, "run_dir": str(run_dir)}
    if ctx.is_main:
        summary["env_steps_per_s"] = result.env_steps / result.wall_s if result.wall_s > 0 else None
        write_json(run_dir / "summary.json", summary)
    env.close()
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from torch.distributed.elastic.multiprocessing.errors import record

    try:
        record(run)(args)
    except AgentConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
