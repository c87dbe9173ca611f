"""The ``scale`` subcommand: the job resolved like a launch, then run at 1, 2, ..., N ranks on this
node (N: ``--nproc`` / ``--gpus``) for a few iterations each through the launch path itself
(:func:`islab.cli.app.plan_for` + :func:`islab.run.supervise.run_plan`), the pre-flight probing
the N-rank job's collectives first; the table, the limit, the prediction and ``scale.png`` come from
:mod:`islab.scale` (docs/SCALE.md).

Output: ``<log_dir>/<lib>/<task>/scale_<time>/`` with one run directory per rank count
(``ranks_<n>/``), ``scale.md`` (the table and the lines printed), ``scale.json`` and ``scale.png``.

Exit codes: 0 every run finished; 1 a run failed (its run directory named); 2 the options are wrong
(nothing started).
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from islab.cli.app import fail, plan_for, resolve
from islab.cli.launch_checks import PreflightOptions, preflight_options, run_collective_check, sync_work_of
from islab.cli.options import keyword, signature
from islab.doctor.probes import visible_gpu_count
from islab.plan.launch_issues import launch_issues
from islab.resolve.layers import Source
from islab.run.supervise import ConsoleOptions, run_plan
from islab.rundir import claim_new_dir, read_progress, write_text_atomic
from islab.scale.plot import write_scale_plot
from islab.scale.table import (
    Collective,
    RankRun,
    format_table,
    limit,
    measured_run,
    predict,
    prediction_lines,
    rows_of,
    to_json,
)
from islab.spec.issues import Issue, SpecError
from islab.spec.worker_args import THREADS_VARIABLE

PANEL_SCALE = "Scale"
DEFAULT_ITERATIONS = 3
DEFAULT_WARMUP = 1


def _option(name: str, kind: Any, default: Any, help_text: str, flag: str | None = None):
    args = (flag,) if flag else ()
    return keyword(name, Annotated[kind, typer.Option(*args, help=help_text, rich_help_panel=PANEL_SCALE)], default)


SCALE_OPTIONS = (
    _option("json_output", bool, False, "Print the result as JSON (the table goes to stderr).", "--json"),
    _option("iterations", int, DEFAULT_ITERATIONS, "Training iterations per rank count."),
    _option("warmup", int, DEFAULT_WARMUP,
            "Iterations not measured at the start of each run (imports, first compilations)."),
)  # fmt: skip

SCALE_EPILOG = """\
[bold]Examples[/bold]

  [dim]# Cartpole with rsl_rl at 1 and 2 CPU ranks, 512 envs per rank[/dim]
  islab-train scale --lib rsl_rl --device cpu --nproc 2 --num-envs 512

  [dim]# every GPU of this node, as JSON[/dim]
  islab-train scale --lib rl_games --gpus all --json

Each rank count runs the same job (the same envs per rank: weak scaling) for --iterations
iterations. The table, scale.png, scale.json and scale.md go to <log-dir>/<lib>/<task>/scale_<time>/.
"""


def check_options(spec: Any, options: dict[str, Any]) -> None:
    """The scale options against the job: every problem named with its fix (exit 2)."""
    issues = []
    if spec.entrypoint is not None:
        issues.append(Issue("scale", "runs islab's own worker; a --script/--module/--command/--isaaclab entry point "
                            "is not supported yet", "Drop the entry point and give --task and --lib"))  # fmt: skip
    if spec.nnodes > 1:
        issues.append(Issue("--nnodes", f"scale runs on this node only, got {spec.nnodes} nodes",
                            "Drop --nnodes (or the cluster file's nodes) and give --nproc / --gpus"))  # fmt: skip
    if spec.resume is not None:
        issues.append(Issue("--resume", "scale measures fresh runs", "Drop --resume"))
    if options["iterations"] < 1:
        issues.append(Issue("--iterations", f"{options['iterations']} is below 1", "Give e.g. --iterations 3"))
    elif not 0 <= options["warmup"] < options["iterations"]:
        issues.append(Issue("--warmup", f"{options['warmup']} leaves no measured iteration of {options['iterations']}",
                            f"Give --warmup between 0 and {options['iterations'] - 1}"))  # fmt: skip
    if issues:
        raise SpecError(issues)


def pinned_threads(spec: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """The spec's env with CPU ranks' threads pinned to what one rank of the N-rank job gets (cores // N):
    weak scaling compares n ranks with n x one rank *of that job*, and one rank alone would otherwise
    take every core (cores // 1 threads). A thread count the user set stands."""
    if spec.device != "cpu" or THREADS_VARIABLE in spec.env or THREADS_VARIABLE in environ:
        return dict(spec.env)
    threads = max(1, (os.cpu_count() or 1) // spec.nproc_per_node)
    return {**spec.env, THREADS_VARIABLE: str(threads), "OMP_NUM_THREADS": str(threads)}


def run_at(resolved: Any, ranks: int, iterations: int, run_dir: Path, checks: PreflightOptions) -> tuple[int, str]:
    """The job at ``ranks`` ranks for ``iterations`` iterations in ``run_dir``: its exit status and
    what the launcher printed (kept for a failure)."""
    spec = resolved.spec.model_copy(
        update={
            "nproc_per_node": ranks,
            "max_iterations": iterations,
            "total_env_steps": None,
            "run_name": None,
            "env": pinned_threads(resolved.spec, os.environ),
        }
    )
    plan = plan_for(dataclasses.replace(resolved, spec=spec), checks, run_dir=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    captured = io.StringIO()
    status = run_plan(plan, 0, stdout=captured, stderr=captured, console=ConsoleOptions(all_ranks=False))
    return status, captured.getvalue()


def preflight_at(resolved: Any, ranks: int, run_dir: Path, checks: PreflightOptions) -> dict[str, Any] | None:
    """The pre-flight of the job at ``ranks`` ranks: its report (the all-reduce timings). A failed one
    (its message already printed: ranks on one GPU, a broken network) ends the command as it ends a
    launch."""
    spec = resolved.spec.model_copy(update={"nproc_per_node": ranks, "run_name": None})
    plan = plan_for(dataclasses.replace(resolved, spec=spec), checks, run_dir=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    outcome = run_collective_check(spec, plan, 0, checks.timeout_s)
    if not outcome.ok:
        raise typer.Exit(outcome.status)
    return outcome.report


def scale_command(ctx: typer.Context, **options: Any) -> None:
    resolved = resolve(ctx, options)
    spec = resolved.spec
    try:
        check_options(spec, options)
        checks = preflight_options(options)
    except SpecError as exc:
        fail(exc)
    # what a launch refuses on this node (platform, GPUs for the ranks, CUDA_VISIBLE_DEVICES twice)
    visible_gpus = visible_gpu_count({**os.environ, **spec.env}) if spec.device == "cuda" else 0
    defaulted = resolved.sources.get("device", Source.DEFAULT) == Source.DEFAULT
    refused = launch_issues(spec, platform=sys.platform, visible_gpus=visible_gpus, environ=os.environ,
                            device_defaulted=defaulted)  # fmt: skip
    if refused:
        fail(SpecError(refused))
    iterations, warmup, most = options["iterations"], options["warmup"], spec.nproc_per_node
    out = sys.stderr if options["json_output"] else sys.stdout
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    folder = claim_new_dir(Path(spec.log_dir) / spec.lib / spec.task / f"scale_{stamp}")
    print(f"islab-train scale: {spec.task} with {spec.lib} on {spec.device}, 1..{most} ranks x {spec.num_envs} "
          f"envs, {iterations} iteration(s) each ({warmup} not measured); output: {folder.resolve()}",
          file=sys.stderr, flush=True)  # fmt: skip
    report = None
    if most > 1 and checks.mode != "off":
        report = preflight_at(resolved, most, folder / f"ranks_{most}", checks)
    runs: list[RankRun] = []
    for ranks in range(1, most + 1):
        run_dir = folder / f"ranks_{ranks}"
        status, printed = run_at(resolved, ranks, iterations, run_dir, checks)
        measured = measured_run(read_progress(run_dir), ranks, warmup) if status == 0 else None
        if measured is None:
            sys.stderr.write(printed[-4000:])
            print(f"error: scale: the run at {ranks} rank(s) failed (exit {status}) or measured no iteration; "
                  f"run directory: {run_dir.resolve()}", file=sys.stderr)  # fmt: skip
            raise typer.Exit(1)
        runs.append(measured)
        print(f"  {ranks} rank(s): {measured.env_steps_per_s:,.0f} env steps/s, "
              f"{measured.iteration_s * 1e3:.0f} ms per iteration", file=sys.stderr, flush=True)  # fmt: skip
    work = sync_work_of(spec, os.environ)
    collective = Collective.from_report(report)
    rows = rows_of(runs, work, collective)
    found = limit(rows, work, collective, num_envs=spec.num_envs, cpu_cores=os.cpu_count() if spec.device == "cpu"
                  else None)  # fmt: skip
    predicted = predict(work, collective, runs[0])
    lines = [*format_table(rows), f"limit: {found.line}"]
    if collective is not None:
        lines.append(f"all-reduce at {collective.ranks} ranks (pre-flight): {collective.alpha_s * 1e6:.0f} us "
                     f"each, {collective.busbw_bytes_per_s / 1e9:.2g} GB/s bus bandwidth")  # fmt: skip
    if predicted:
        lines += [
            "sync model at more ranks (this node's all-reduce, same envs per rank):",
            *prediction_lines(predicted),
        ]
    plot = write_scale_plot(rows, predicted, folder / "scale.png", f"{spec.lib} · {spec.task} · {spec.device}")
    about = {"task": spec.task, "lib": spec.lib, "device": spec.device, "num_envs_per_rank": spec.num_envs,
             "plot": str(plot.resolve())}  # fmt: skip
    document = to_json(rows, found, predicted, collective, about)
    write_text_atomic(folder / "scale.json", document + "\n")
    write_text_atomic(folder / "scale.md", "\n".join(["```", *lines, "```", "", "![scale](scale.png)"]) + "\n")
    if options["json_output"]:
        print(document)
    for line in lines:
        print(line, file=out)
    print(f"plot: {plot.resolve()}", file=out)


scale_command.__signature__ = signature(train=False, own=SCALE_OPTIONS)  # type: ignore[attr-defined]
SCALE_HELP = ("Run the job at 1, 2, ..., N ranks on this node (N: --nproc / --gpus), a few iterations each: env "
              "steps/s, efficiency against N x one rank, the sync share, the pre-flight's all-reduce, what the sync "
              "model predicts at 8, 16, 64 ranks and what limits scaling; a table and scale.png under --log-dir. "
              "Takes the same options as a launch.")  # fmt: skip
