"""The per-rank training entry point: ``python -m islab.worker`` (or this file's path for skrl-JAX).

Every rank of a job runs this same program; only its environment variables differ. The flow,
top to bottom, is the whole story of a rank:

    args            what the launcher decided for the whole job (identical on every rank)
    RankContext     who this rank is: global rank, device, backend, seed
    run directory   chosen by the launcher; this rank tees its output to logs/rank_<R>.log
    process group   gloo on CPU / NCCL on GPU (torchrun jobs; skrl-JAX joins jax.distributed)
    env             ONE batched environment of num_envs on this rank's device, seeded per rank
    adapter         ONE policy, trained by the chosen library; gradients averaged across ranks
    resume          with --resume, after an elastic restart or a SLURM requeue: the checkpoint
                    rank 0 reads and broadcasts (islab.worker.resume, .checkpoint, .collectives),
                    loaded into the adapter before training
    preemption      SIGTERM/SIGUSR1: every rank stops after the same iteration, rank 0 checkpoints
                    it, the rank exits 75 (islab.worker.preemption, islab.spec.stopping)
    results         policy digest per rank (to prove every rank holds the same policy), summary

Iterations count from the start of a run, across resumes (islab.worker.resume). ``--total-env-steps T``
replaces ``--max-iterations`` with ``ceil(T / (world size × num_envs × rollout length))``
iterations, computed here from the world size this job actually got (islab.spec.budget); with
``--resume`` that is T more env steps (``--resume`` alone: the run's original target, islab.worker.resume).

``@record`` makes an exception's traceback reach torchrun's failure summary instead of being lost.
This file uses absolute imports only, because skrl's JAX launcher runs it as a script, and so does
torchrun when it forks the ranks from its agent (``--run-path --start-method fork``, CPU ranks).
How a rank ends either way: islab.worker.leaving.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from islab import rundir
from islab.libs.registry import adapter_module, apply_env_fixes, launcher_of
from islab.spec.agent_config import AgentConfigError, load_agent_config
from islab.spec.budget import Budget
from islab.spec.worker_args import build_parser, parse
from islab.tasks import TASKS, add_task_module
from islab.worker.faults import maybe_inject_fault
from islab.worker.leaving import (
    default_signal_handlers,
    destroy_process_group,
    flush_for_exit,
    forked_from_agent,
    leave_process_group_together,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line the planner wrote (islab.spec.worker_args declares every argument), plus
    the checks that need this side: the task is registered, the library has the framework."""
    parser = build_parser(description=__doc__.splitlines()[0])
    args = parse(parser, argv)
    if args.task_module is not None:
        add_task_module(args.task_module)
    if args.task not in TASKS:
        parser.error(f"--task {args.task!r} is not registered; known: {', '.join(TASKS)}")
    if launcher_of(args.lib, args.ml_framework) is None:
        parser.error(f"--ml-framework {args.ml_framework} is not available with --lib {args.lib}")
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
    # A fatal signal (SIGABRT from a C++ library, SIGSEGV) bypasses sys.stderr; without this the
    # rank's log would end mid-story and the failure message would have no traceback to point at.
    faulthandler.enable(file=log, all_threads=True)
    # The launcher's hang watch sends this to a rank that stopped making progress: every thread's
    # stack goes to the log, from faulthandler's C handler, so a rank stuck inside C code dumps too.
    faulthandler.register(rundir.STACK_DUMP_SIGNAL, file=log, all_threads=True)


class Heartbeat:
    """This rank's ``heartbeats/rank_<R>.json`` (islab.rundir): written when training starts
    (``done`` 0: the first iteration includes warm-up, so the hang watch does not count it yet)
    and after every iteration."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        self.run_dir, self.rank, self.done = run_dir, rank, 0

    def start(self, iteration: int) -> None:
        rundir.write_heartbeat(self.run_dir, self.rank, iteration=iteration, done=0)

    def __call__(self, iteration: int) -> None:
        self.done += 1
        rundir.write_heartbeat(self.run_dir, self.rank, iteration=iteration, done=self.done)


def budget_for(args: argparse.Namespace, agent_cfg: dict[str, Any], world_size: int) -> Budget:
    """``--total-env-steps`` as iterations: divided by what one iteration of ``world_size`` ranks
    collects -- the world size this job actually got, which an elastic job only knows now."""
    return Budget.of(
        args.lib, agent_cfg, num_envs=args.num_envs, world_size=world_size, total_env_steps=args.total_env_steps
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    # The launcher already set them; a rank started by hand gets them here (the user's value wins).
    apply_env_fixes(args.lib, args.ml_framework, args.device)
    # Forked from torchrun's agent, a rank finds its library imported already (LaunchPlan.rank_imports).
    preloaded = adapter_module(args.lib, args.ml_framework)
    imported_by = "torchrun's agent" if preloaded in sys.modules else "this rank"

    # torch is imported only now: argument errors above stay instant.
    from islab.envs import make_env
    from islab.libs import load_adapter
    from islab.libs.base import TrainResult, state_digest
    from islab.worker.checkpoint import Checkpointer, generator_digest, identity, restore
    from islab.worker.collectives import collective_for
    from islab.worker.context import RankContext, configure_process, init_process_group
    from islab.worker.preemption import Preempted, StopRequest
    from islab.worker.resume import RESUME, find_resume_point, last_reported_iteration

    ctx = RankContext.from_environ(args.device, args.seed)
    run_dir: Path = args.run_dir
    tee_output(rundir.rank_log(run_dir, ctx.rank))
    print(
        f"[islab] rank {ctx.rank}/{ctx.world_size} (local {ctx.local_rank}) on {ctx.device} "
        f"backend={ctx.backend} seed={ctx.seed} launcher={ctx.launcher} pid={os.getpid()}; "
        f"{preloaded} imported by {imported_by}",
        flush=True,
    )
    maybe_inject_fault(ctx.rank, run_dir, iteration=None)
    if ctx.distributed and not args.distributed:
        raise SystemExit(
            f"error: this rank is one of {ctx.world_size} (launched by {ctx.launcher}) but --distributed "
            "was not given; without it every rank would train alone. Add --distributed."
        )

    configure_process(ctx)
    init_process_group(ctx, timeout_s=args.peer_timeout)
    # --video-interval: only rank 0 renders; every other rank's env has no renderer (islab.video.training)
    records_video = bool(args.video_interval) and ctx.is_main
    if records_video:  # before the agent config imports the task: MuJoCo reads MUJOCO_GL once, at import
        from islab.envs.gl_backend import choose_mujoco_gl

        choose_mujoco_gl(ctx.device, os.environ)
    agent_cfg = load_agent_config(args.lib, args.task, args.overrides)
    if args.total_env_steps is not None:
        budget = budget_for(args, agent_cfg, ctx.world_size)
        args.max_iterations = budget.iterations  # from here on (resume, spec.yaml) the budget is iterations
        if ctx.is_main:
            print(f"[islab] {budget.describe(resuming=args.resume is not None)}", flush=True)
    # Imported before anything collective: skrl-JAX joins jax.distributed when skrl is imported.
    adapter_class = load_adapter(args.lib, args.ml_framework)
    render_mode = "rgb_array" if records_video else None
    env = make_env(args.task, args.num_envs, ctx.device, seed=ctx.seed, render_mode=render_mode)
    print(f"[islab] rank {ctx.rank} env generator at start: {generator_digest(env.generator)}", flush=True)
    if args.video_interval:
        print(f"[islab] rank {ctx.rank} render_mode={env.render_mode}", flush=True)
    observation_shape = env.single_observation_space["policy"].shape
    run_identity = identity(args.lib, args.ml_framework, args.task, observation_shape, env.single_action_space.shape)
    collective = collective_for(ctx)
    point = find_resume_point(args, collective, run_identity, dict(os.environ))
    start_iteration = int(point.checkpoint["iteration"]) if point.checkpoint is not None else 0

    spec: dict[str, Any] = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
    spec.update(
        world_size=ctx.world_size,
        start_iteration=start_iteration,
        target_iteration=point.target_iteration,
        job_id=os.environ.get("TORCHELASTIC_RUN_ID"),
        scheduler_job=args.scheduler_job,  # a requeued job resumes only its own checkpoints
    )
    resumed: dict[str, Any] | None = None
    # --resume of a run already at its target: nothing to train, and the run's records stay as they
    # are (the launcher stops such a launch itself when it can tell from summary.json).
    keep_records = point.reason == RESUME and start_iteration >= point.target_iteration
    if ctx.is_main and not keep_records:
        rundir.write_run_spec(run_dir, spec, agent_cfg)

    adapter = adapter_class(ctx, env, agent_cfg, run_dir)
    if point.checkpoint is not None:
        digest = restore(adapter, point.checkpoint, ctx.rank)
        resumed = {
            "reason": point.reason,
            "checkpoint": point.source,
            "iteration": start_iteration,
            "policy_sha256_saved": point.checkpoint["policy_sha256"],
            "policy_sha256_loaded": digest,
        }
        if ctx.is_main and point.is_restart:
            reported = last_reported_iteration(rundir.progress_path(run_dir))
            resumed["lost_iterations"] = None if reported is None else max(0, reported - start_iteration)
        lost = resumed.get("lost_iterations")
        if ctx.is_main:  # stderr: rank 0's stderr reaches the console
            print(f"islab-train: resuming at iteration {start_iteration}, training to {point.target_iteration}"
                  + (" (already there: --max-iterations M with --resume trains M more)"
                     if start_iteration >= point.target_iteration else ""), file=sys.stderr, flush=True)  # fmt: skip
        print(
            f"[islab] rank {ctx.rank} resumed ({point.reason}) from {point.source} at iteration {start_iteration}, "
            f"training to {point.target_iteration}; policy sha256 {digest[:12]} equals the checkpoint's"
            + ("" if lost is None else f"; {lost} iteration(s) since that checkpoint were lost and are redone"),
            flush=True,
        )
    stop = StopRequest()
    adapter.checkpointer = Checkpointer(
        collective,
        run_dir,
        run_identity,
        spec,
        interval=args.checkpoint_interval,
        keep=args.keep_checkpoints,
        stop=stop,
    )
    wandb_logger = None
    if args.logger == "wandb" and ctx.is_main:
        from islab.worker.wandb_logger import WandbLogger

        wandb_logger = WandbLogger(run_dir, spec)
        adapter.iteration_hooks.append(wandb_logger)
    if records_video:
        from islab.video.training import TrainingVideoRecorder

        wandb_run = None if wandb_logger is None else wandb_logger.run
        adapter.iteration_hooks.append(
            TrainingVideoRecorder(env, run_dir, args.video_interval, adapter.iteration, wandb_run=wandb_run)
        )
    adapter.iteration_hooks.append(lambda _, iteration, __: maybe_inject_fault(ctx.rank, run_dir, iteration))
    # Last hook: a heartbeat means the iteration finished completely (checkpoint and faults included),
    # so a rank stuck in any of them is behind its peers in the launcher's hang watch.
    beat = Heartbeat(run_dir, ctx.rank)
    adapter.iteration_hooks.append(lambda _, iteration, __: beat(iteration))

    remaining = point.target_iteration - adapter.iteration
    beat.start(adapter.iteration)
    # From here on a preempting signal stops after an iteration; before, its default action ends the
    # rank at once (nothing to checkpoint yet, and a rank blocked in the rendezvous must still die).
    stop.install()
    started = time.perf_counter()
    try:
        if remaining > 0:
            result = adapter.train(remaining)
        else:  # an elastic restart after the last checkpoint was written: nothing left to train
            result = TrainResult(iterations=0, env_steps=0, wall_s=0.0, mean_return=None, checkpoint=None)
    except Preempted as preempted:
        if wandb_logger is not None:
            wandb_logger.finish()  # the run goes on after the requeue / --resume
        _report_preemption(ctx, run_dir, adapter, preempted, start_iteration, point.target_iteration)
        env.close()
        raise
    except BaseException:
        if wandb_logger is not None:
            wandb_logger.finish(exit_code=1)
        raise
    if wandb_logger is not None:
        wandb_logger.finish()
    print(
        f"[islab] rank {ctx.rank} finished {result.iterations} iterations (now at {adapter.iteration}), "
        f"{result.env_steps} env steps in {time.perf_counter() - started:.1f} s, mean return {result.mean_return}",
        flush=True,
    )

    digest = state_digest(adapter.policy_state())
    rundir.write_digest(run_dir, ctx.rank, digest, ctx.world_size)
    library_checkpoint = result.checkpoint
    summary = {
        **{key: value for key, value in result.to_dict().items() if key != "checkpoint"},
        rundir.SUMMARY_CHECKPOINT: None,  # rank 0's islab checkpoint, below
        rundir.SUMMARY_LIBRARY_CHECKPOINT: library_checkpoint,
        "iteration": adapter.iteration,
        "start_iteration": start_iteration,
        "resumed": resumed,
        "total_env_steps": args.total_env_steps,
        "world_size": ctx.world_size,
        "run_dir": str(run_dir),
    }
    if ctx.is_main and not keep_records:
        written = adapter.checkpointer.last_written
        summary[rundir.SUMMARY_CHECKPOINT] = str(written) if written else None
        summary["env_steps_per_s"] = result.env_steps / result.wall_s if result.wall_s > 0 else None
        rundir.write_summary(run_dir, summary)
    env.close()
    return summary


def _report_preemption(
    ctx: Any, run_dir: Path, adapter: Any, preempted: Any, start_iteration: int, target_iteration: int
) -> None:
    """One line per rank; rank 0 writes summary.json with ``preempted`` (the launcher's exit code
    and message come from it)."""
    written = adapter.checkpointer.last_written
    print(
        f"[islab] rank {ctx.rank} stopped by {preempted.signal_name} after iteration {preempted.iteration} "
        f"of {target_iteration}" + (f"; checkpoint {written}" if written else ""),
        flush=True,
    )
    if ctx.is_main:
        rundir.write_summary(run_dir, {
            "preempted": {"signal": preempted.signal_name, "iteration": preempted.iteration},
            "iteration": preempted.iteration,
            "iterations": preempted.iteration - start_iteration,
            "start_iteration": start_iteration,
            "target_iteration": target_iteration,
            "islab_checkpoint": str(written) if written else None,
            "world_size": ctx.world_size,
            "run_dir": str(run_dir),
        })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    if not forked_from_agent():
        return _main(argv, forked=False)
    default_signal_handlers()
    try:
        return _main(argv, forked=True)
    finally:
        # torchrun's wrapper ends a forked rank with os._exit: what the interpreter's exit would
        # still write (the libraries' TensorBoard events, atexit handlers) is written now, on every path.
        flush_for_exit()


def _main(argv: list[str] | None, *, forked: bool) -> int:
    args = parse_args(argv)
    from torch.distributed.elastic.multiprocessing.errors import record

    from islab.spec.stopping import PREEMPTED_EXIT_CODE
    from islab.worker.checkpoint import CheckpointError
    from islab.worker.preemption import Preempted

    try:
        record(run)(args)
        code = 0
    except (AgentConfigError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        destroy_process_group()
        return 2
    except Preempted:  # every rank stopped after the same iteration, which rank 0 checkpointed
        code = PREEMPTED_EXIT_CODE
    except BaseException:
        jax_rank = "JAX_RANK" in os.environ
        if forked or jax_rank:  # torchrun's wrapper of a forked rank, like os._exit, prints no traceback
            traceback.print_exc()
        if not jax_rank:
            destroy_process_group()
            raise
        # A failing JAX rank must die now: jax.distributed's exit hook waits in a barrier for the
        # peers, which are still training, so the job would hang until a heartbeat timeout (~5 min).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    leave_process_group_together(code)
    destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
