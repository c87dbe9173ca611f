"""The subcommands: ``doctor`` (pre-flight checks), ``sbatch`` (a SLURM batch script), ``k8s`` (a
Kubernetes job: :mod:`islab.cli.k8s_command`), ``sky`` (a SkyPilot task: :mod:`islab.cli.sky_command`),
``tasks``, ``play`` and ``export`` (a trained run: :mod:`islab.policy.cli_commands`), ``eval`` (every kept
checkpoint of a run: :mod:`islab.cli.eval_command`), ``sweep`` (many runs on Ray Tune: :mod:`islab.sweep`),
``fit`` (how many envs fit: :mod:`islab.cli.fit_command`), ``scale`` (the job at 1..N ranks:
:mod:`islab.cli.scale_command`).

``doctor`` and ``sbatch`` take the training command's spec options (the option table of
:mod:`islab.cli.options`), so option names, help, environment variables and validation stay one
definition; their own options are declared here.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from islab import rundir
from islab.cli.app import plan_for, typer_app
from islab.cli.eval_command import EVAL_HELP, eval_command
from islab.cli.fit_command import FIT_EPILOG, FIT_HELP, fit_command
from islab.cli.k8s_command import K8S_EPILOG, K8S_HELP, k8s_command
from islab.cli.launch_checks import preflight_options, run_collective_check
from islab.cli.options import OPTIONS, keyword, option_words, signature
from islab.cli.policy_command import EXPORT_HELP, PLAY_HELP, export_command, play_command
from islab.cli.scale_command import SCALE_EPILOG, SCALE_HELP, scale_command
from islab.cli.sky_command import SKY_EPILOG, SKY_HELP, sky_command
from islab.cli.spec_layers import checked, entry_args, fail, resolve, source_of
from islab.doctor import checks as doctor
from islab.doctor import facts as doctor_facts
from islab.doctor import report as doctor_report
from islab.doctor.probes import find_free_port
from islab.plan import plan as planner
from islab.plan import sbatch
from islab.preflight.report import public_report
from islab.resolve import slurm
from islab.spec.issues import Issue, SpecError

PANEL_DOCTOR = "Doctor"
PANEL_SBATCH = "Batch script"

commands = typer_app(add_completion=False, no_args_is_help=True)


JSON_OPTION = keyword(
    "json_output",
    Annotated[
        bool, typer.Option("--json", help="Print JSON (for CI) instead of a table.", rich_help_panel=PANEL_DOCTOR)
    ],
    False,
)

DOCTOR_EPILOG = """\
[bold]Examples[/bold]

  [dim]# this workstation, before a 2-GPU run[/dim]
  islab-train doctor --gpus 2

  [dim]# each node of a cluster, same file; node 1 also checks that node 0's port answers[/dim]
  islab-train doctor --cluster configs/cluster/two-node-static.yaml --node-rank 1

  [dim]# CI: machine-readable; exit 0 only when nothing failed[/dim]
  islab-train doctor --device cpu --nproc 2 --json

  [dim]# the collective path itself: the job's plan with a probe on every rank (run on every node)[/dim]
  islab-train doctor --collectives --device cpu --nproc 2 --json

Exit codes: 0 no check failed (warnings allowed), 1 a check failed, 2 the options are wrong.
islab-train runs the cheap checks (interfaces, address, port, disk) before every real launch.
"""


COLLECTIVES_OPTION = keyword(
    "collectives",
    Annotated[
        bool,
        typer.Option(
            "--collectives",
            help="Run the pre-flight probe alone instead of the checks: the job's own plan with a probe on every "
            "rank (run it on every node, like the launch); prints its line, or with --json the report "
            "{ok, world_size, nodes, ranks, all_reduce, seconds, problems}.",
            rich_help_panel=PANEL_DOCTOR,
        ),
    ],
    False,
)


def doctor_command(ctx: typer.Context, **options: Any) -> None:
    resolved = resolve(ctx, options)
    spec = resolved.spec
    if options["collectives"]:
        _collectives(resolved, options)
    try:
        plan = planner.build_plan(spec, now=datetime.now(), free_port=find_free_port())
    except SpecError as exc:
        fail(exc)
    facts = doctor_facts.gather_facts(spec, plan, full=True)
    checks = doctor.run_checks(facts)
    if options["json_output"]:
        print(doctor_report.to_json(checks, facts))
    else:
        from rich.console import Console

        doctor_report.render_table(checks, facts, Console(highlight=False, width=None if sys.stdout.isatty() else 140))
    raise typer.Exit(0 if doctor.all_passed(checks) else 1)


def _collectives(resolved: Any, options: dict[str, Any]) -> None:
    """``doctor --collectives``: the pre-flight alone; exit 0 healthy, 1 not."""
    spec = resolved.spec
    checks = checked(preflight_options, options)
    plan = plan_for(resolved, checks)
    if spec.nnodes * spec.nproc_per_node < 2:
        fail(SpecError(Issue("--collectives", "a single rank has no collectives to check",
                             "Give --nproc 2 (or --gpus 2, or several nodes)")))  # fmt: skip
    node_rank = spec.node_rank if spec.node_rank is not None else 0
    outcome = run_collective_check(spec, plan, node_rank, checks.timeout_s)
    if options["json_output"]:
        print(json.dumps(public_report(outcome.report or {}), indent=2))
    raise typer.Exit(outcome.status)


doctor_command.__signature__ = signature(  # type: ignore[attr-defined]
    train=False, own=(JSON_OPTION, COLLECTIVES_OPTION)
)
commands.command(
    "doctor",
    epilog=DOCTOR_EPILOG,
    help="Check this node before launching: GPUs vs processes, NCCL/gloo, the rendezvous address "
    "and port, NCCL_/GLOO_SOCKET_IFNAME, library versions, driver vs torch CUDA, disk, OS. "
    "Takes the same options as a launch.",
)(doctor_command)


SBATCH_OPTIONS = (
    keyword(
        "partition",
        Annotated[str | None, typer.Option(help="#SBATCH --partition.", rich_help_panel=PANEL_SBATCH)],
        None,
    ),
    keyword(
        "time",
        Annotated[
            str | None,
            typer.Option(help="#SBATCH --time, e.g. 02:00:00.", rich_help_panel=PANEL_SBATCH),
        ],
        None,
    ),
    keyword(
        "cpus_per_task",
        Annotated[
            int | None,
            typer.Option(
                help="#SBATCH --cpus-per-task (one task per node). Default: --nproc for CPU ranks, 4 per GPU.",
                rich_help_panel=PANEL_SBATCH,
            ),
        ],
        None,
    ),
    keyword(
        "requeue",
        Annotated[
            bool,
            typer.Option(
                "--requeue",
                help="#SBATCH --requeue and --signal=B:USR1@<--signal-before>: on SIGUSR1 (time limit near) "
                "or SIGTERM (preemption, scontrol requeue) the ranks checkpoint and stop (exit 75); "
                f"the requeued job resumes from its run directory's {rundir.latest_checkpoint('')} by itself.",
                rich_help_panel=PANEL_SBATCH,
            ),
        ],
        False,
    ),
    keyword(
        "signal_before",
        Annotated[
            int,
            typer.Option(
                metavar="SECONDS",
                help="With --requeue: SLURM sends SIGUSR1 this long before --time runs out.",
                rich_help_panel=PANEL_SBATCH,
            ),
        ],
        sbatch.DEFAULT_SIGNAL_BEFORE_S,
    ),
    keyword(
        "job_name",
        Annotated[
            str | None, typer.Option(help="#SBATCH --job-name. Default: islab-<lib>.", rich_help_panel=PANEL_SBATCH)
        ],
        None,
    ),
)

SBATCH_EPILOG = """\
[bold]Examples[/bold]

  [dim]# 2 nodes x 4 GPUs, submit right away[/dim]
  islab-train sbatch --nnodes 2 --gpus 4 --partition gpu --time 04:00:00 > job.sh && sbatch job.sh

  [dim]# CPU ranks on one node[/dim]
  islab-train sbatch --device cpu --nproc 2 --num-envs 64 --max-iterations 3 > job.sh

  [dim]# preemptible: checkpoint on SIGTERM / SIGUSR1 (120 s before --time), requeue, resume by itself[/dim]
  islab-train sbatch --gpus 4 --time 04:00:00 --requeue > job.sh && sbatch job.sh

Every node runs `islab-train --slurm ...` with the options given here; nnodes, the node rank and
node 0's address:port come from the allocation. The run directory is
<log_dir>/<lib>/<task>/slurm-<job id>; the job's output goes to
<log_dir>/slurm-<job name>-<job id>.out (the log directory is created now).
"""


def sbatch_command(ctx: typer.Context, **options: Any) -> None:
    def planned_allocation(chosen: Any) -> Any:
        nnodes = chosen.get("nnodes", 1)
        nnodes = nnodes if isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes > 0 else 1
        hosts = tuple(f"node{index}" for index in range(nnodes))
        return slurm.Allocation(1, nnodes, 0, hosts, "SLURM_JOB_NODELIST", "SLURM_NNODES").layer(chosen)

    spec = resolve(ctx, {**options, "slurm": None}, slurm_layer=planned_allocation, elsewhere=True).spec
    log_dir = Path(spec.log_dir).absolute()
    gpus_per_node = spec.nproc_per_node if spec.device == "cuda" else 0
    cpus = options["cpus_per_task"] or (spec.nproc_per_node if spec.device == "cpu" else 4 * spec.nproc_per_node)
    batch = sbatch.BatchOptions(
        nodes=spec.nnodes,
        job_name=options["job_name"] or f"islab-{spec.lib}",
        output=str(log_dir / "slurm-%x-%j.out"),
        cpus_per_task=cpus,
        gpus_per_node=gpus_per_node,
        partition=options["partition"],
        time=options["time"],
        requeue=options["requeue"],
        signal_before_s=options["signal_before"],
    )
    issues = sbatch.batch_option_issues(batch)
    if issues:
        fail(SpecError(issues))
    node_command = [spec.python, "-m", "islab.cli", "--slurm", *_forwarded_options(ctx, options, log_dir)]
    log_dir.mkdir(parents=True, exist_ok=True)
    print(sbatch.sbatch_script(batch, node_command), end="", flush=True)
    print(f"islab-train: batch script for {spec.nnodes} node(s); job output goes to {batch.output}", file=sys.stderr)


sbatch_command.__signature__ = signature(  # type: ignore[attr-defined]
    train=False, exclude=("slurm", "node_rank"), own=SBATCH_OPTIONS
)
commands.command(
    "sbatch",
    epilog=SBATCH_EPILOG,
    help="Print a SLURM batch script that runs this training on --nnodes nodes (one "
    "islab-train --slurm per node, started by srun). Usage: islab-train sbatch ... > job.sh && sbatch job.sh",
)(sbatch_command)


def _forwarded_options(ctx: typer.Context, options: dict[str, Any], log_dir: Path) -> list[str]:
    """The options typed for `sbatch` that each node's `islab-train --slurm` must get too
    (ISLAB_* variables reach the nodes through sbatch's default --export=ALL)."""
    args: list[str] = []
    # spec fields first, then --gpus and --cluster (which stand for several fields)
    for option in sorted(OPTIONS, key=lambda option: option.field is None):
        value = options.get(option.name)
        typed = value is not None and source_of(ctx, option.name) == "COMMANDLINE"
        if option.name == "nnodes" or option.train_only or not typed:
            continue
        if option.name == "log_dir":
            value = str(log_dir)
        elif option.name == "cluster":
            value = str(Path(value).absolute())
        args += option_words(option, value)
    args += list(options.get("overrides") or ())
    if entry_args() is not None:  # the entry point's own arguments, verbatim
        args += ["--", *entry_args()]
    return args


@commands.command("tasks", help="List the registered tasks, their sizes, and which libraries have agent configs.")
def tasks_command(
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    task_module: Annotated[
        str | None, typer.Option("--task-module", metavar="MOD", help="Also list the tasks MOD registers.")
    ] = None,
) -> None:
    from islab.tasks import TASKS, TaskRegistrationError, add_task_module, agent_config_path
    from islab.tasks.listing import print_task_rows, task_rows

    if task_module is not None:
        try:
            add_task_module(task_module)
        except TaskRegistrationError as exc:
            print(f"error: --task-module: {exc}.", file=sys.stderr)
            raise typer.Exit(2) from None
    rows = task_rows()
    if json_output:
        import json

        print(json.dumps(rows, indent=2))
        return
    notes = [f"Agent configs live in each task's agents/ folder, e.g. {agent_config_path('rsl_rl', next(iter(TASKS)))}"]
    print_task_rows(rows, sys.stdout, notes)


commands.command("play", help=PLAY_HELP)(play_command)
commands.command("export", help=EXPORT_HELP)(export_command)
commands.command("eval", help=EVAL_HELP)(eval_command)


@commands.command(
    "sweep",
    help="Run many islab-train runs from SWEEP.yaml on Ray Tune: seeds x agent-config searches (grid, random, "
    "optuna), several trials at once, one summary (sweep.json, summary.md, curves.png). Needs the [sweep] extra "
    "except for --dry-run. Example: islab-train sweep configs/sweeps/cartpole-lr.yaml --dry-run. "
    "Exit codes: 0 all trials finished, 1 a trial failed, 2 bad input (nothing started), 130 interrupted "
    "(continue with --resume SWEEP_DIR). Reference: docs/SWEEPS.md.",
)
def sweep_command(
    sweep_file: Annotated[
        Path | None, typer.Argument(help="The sweep file (see configs/sweeps/).", show_default=False)
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print every trial's command; start nothing.")] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON: the plan (with --dry-run) or sweep.json at the end.")
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT of an existing Ray cluster's head (default: an embedded local Ray).", metavar="HOST:PORT"
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue the sweep in SWEEP_DIR: trials without a result run (again).", metavar="SWEEP_DIR"),
    ] = None,
) -> None:
    from islab.sweep.command import sweep_main

    raise typer.Exit(
        sweep_main(sweep_file, resume=resume, dry_run_only=dry_run, json_output=json_output, ray_address=ray_address)
    )


commands.command("k8s", epilog=K8S_EPILOG, help=K8S_HELP)(k8s_command)
commands.command("sky", epilog=SKY_EPILOG, help=SKY_HELP)(sky_command)
commands.command("fit", epilog=FIT_EPILOG, help=FIT_HELP)(fit_command)
commands.command("scale", epilog=SCALE_EPILOG, help=SCALE_HELP)(scale_command)
