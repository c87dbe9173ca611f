"""``islab-train``: the command line in front of the spec, the planner and the supervisor.

This module only translates: options and ``ISLAB_*`` variables become spec layers
(:func:`islab.spec.resolve_spec` merges and validates them), the spec becomes a plan
(:func:`islab.plan.build_plan`), and the plan is printed (``--dry-run``) or run
(:func:`islab.supervise.run_plan`). Every failure the user can fix is one line on stderr,
``error: <field>: <what is wrong>. <fix>.``, with exit code 2 and no traceback.

Exit codes: 0 success (or a dry run); 2 the spec or command line is wrong, nothing started;
otherwise the training's own status (a failed rank gives non-zero; death by signal N gives 128+N;
islab-train itself stopped by SIGINT/SIGTERM exits 130/143).

Keep imports light: ``--help``, ``--dry-run`` and spec errors must not import torch, numpy or any
RL library (CI runs them constantly). typer does not import rich until help is rendered.
"""

from __future__ import annotations

import inspect
import sys
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from islab.spec import Issue, Provided, SpecError, mask_env

if TYPE_CHECKING:
    from islab.plan import LaunchPlan
    from islab.spec import ResolvedSpec, RunSpec

# islab-train's own arguments as typed (set by run()), for the "how to resume" hint.
_ARGV: list[str] = []

PROG = "islab-train"
# Characters that typesetting puts where "--" was meant (the Chinese edition of Isaac Lab's guide
# prints "–distributed"); argparse/click would report a confusing "unexpected argument".
LOOKALIKE_DASHES = "\u2013\u2014\u2212\u2010\u2011\u2012\ufe63\uff0d"

PANEL_TRAINING = "Training"
PANEL_PROCESSES = "Processes on this node"
PANEL_CLUSTER = "Cluster (several nodes)"
PANEL_OUTPUT = "Output and launching"


class LibChoice(str, Enum):
    rl_games = "rl_games"
    rsl_rl = "rsl_rl"
    skrl = "skrl"


class FrameworkChoice(str, Enum):
    torch = "torch"
    jax = "jax"


class DeviceChoice(str, Enum):
    cuda = "cuda"
    cpu = "cpu"


class RdzvChoice(str, Enum):
    static = "static"
    c10d = "c10d"


EPILOG = """\
[bold]Examples[/bold]

  [dim]# one workstation, 2 GPUs[/dim]
  islab-train --lib rsl_rl --gpus 2

  [dim]# on each node of a cluster (same file everywhere, node rank differs)[/dim]
  islab-train --cluster configs/cluster/two-node-static.yaml --node-rank 0

  [dim]# CI: print the commands as JSON, launch nothing (works without GPUs)[/dim]
  islab-train --lib skrl --ml-framework jax --gpus 2 --dry-run --json

  [dim]# no GPU: 2 CPU ranks over gloo, agent-config override at the end[/dim]
  islab-train --lib rl_games --device cpu --nproc 2 --num-envs 256 params.config.minibatch_size=512

  [dim]# Isaac Sim's interpreter runs the launcher and the ranks[/dim]
  islab-train --python ${ISAACSIM_PYTHON_EXE} --gpus all

  [dim]# check this node first (GPUs, NCCL, address/port, interfaces, versions, driver, disk)[/dim]
  islab-train doctor --cluster configs/cluster/two-node-static.yaml --node-rank 1

  [dim]# SLURM: write a batch script, submit it (each node runs islab-train --slurm)[/dim]
  islab-train sbatch --nnodes 2 --gpus 4 --partition gpu > job.sh && sbatch job.sh

  [dim]# see every rank's output, prefixed [rank R] (default: progress + rank 0's errors)[/dim]
  islab-train --device cpu --nproc 2 --all-ranks

  [dim]# which tasks exist, and for which libraries[/dim]
  islab-train tasks

Commands: islab-train doctor | sbatch | tasks (each has --help).
Precedence: command line > SLURM allocation (--slurm / under srun) > ISLAB_* environment
> --cluster YAML > defaults.
Exit codes: 0 ok / dry run, 2 bad spec (nothing started), else the training's status
(signal N -> 128+N; Ctrl-C -> 130). Reference: docs/CLI.md.
"""

app = typer.Typer(
    name=PROG,
    add_completion=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

# parameter name -> (dotted spec field, option as typed)
OPTION_FIELDS: dict[str, tuple[str, str]] = {
    "lib": ("lib", "--lib"),
    "ml_framework": ("ml_framework", "--ml-framework"),
    "task": ("task", "--task"),
    "num_envs": ("num_envs", "--num-envs"),
    "seed": ("seed", "--seed"),
    "max_iterations": ("max_iterations", "--max-iterations"),
    "total_env_steps": ("total_env_steps", "--total-env-steps"),
    "device": ("device", "--device"),
    "nproc": ("nproc_per_node", "--nproc"),
    "nnodes": ("nnodes", "--nnodes"),
    "node_rank": ("node_rank", "--node-rank"),
    "master_addr": ("rendezvous.master_addr", "--master-addr"),
    "master_port": ("rendezvous.master_port", "--master-port"),
    "rdzv_backend": ("rendezvous.backend", "--rdzv-backend"),
    "rdzv_endpoint": ("rendezvous.endpoint", "--rdzv-endpoint"),
    "rdzv_id": ("rendezvous.id", "--rdzv-id"),
    "rdzv_timeout": ("rendezvous.timeout_s", "--rdzv-timeout"),
    "coordinator_address": ("coordinator_address", "--coordinator-address"),
    "max_restarts": ("max_restarts", "--max-restarts"),
    "run_name": ("run_name", "--run-name"),
    "log_dir": ("log_dir", "--log-dir"),
    "python": ("python", "--python"),
    "resume": ("resume", "--resume"),
    "checkpoint_interval": ("checkpoint_interval", "--checkpoint-interval"),
    "overrides": ("overrides", "KEY=VALUE"),
}
# Options of the training command that are not spec fields (doctor and sbatch reuse the rest).
NOT_SPEC_OPTIONS = frozenset({"dry_run", "json_output", "all_ranks"})


def env_var(param_name: str) -> str:
    return f"ISLAB_{param_name.upper()}"


@app.command(
    epilog=EPILOG,
    help="Launch distributed RL training (rl_games, rsl_rl, skrl) on a workstation, a cluster "
    "or CPU ranks, or print the plan with --dry-run.\n\n"
    "Trailing KEY=VALUE items override the agent config (dotted keys, values parsed as YAML).",
)
def train(
    ctx: typer.Context,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KEY=VALUE]...",
            help="Agent-config overrides, e.g. algorithm.learning_rate=3e-4 (dotted keys into "
            "configs/agents/<lib>/<task>.yaml).",
            show_default=False,
        ),
    ] = None,
    # --- training ---------------------------------------------------------------------------
    lib: Annotated[
        LibChoice | None,
        typer.Option(help="RL library. Default: rsl_rl.", envvar=env_var("lib"), rich_help_panel=PANEL_TRAINING),
    ] = None,
    ml_framework: Annotated[
        FrameworkChoice | None,
        typer.Option(
            help="Learner framework; jax only with --lib skrl. Default: torch.",
            envvar=env_var("ml_framework"),
            rich_help_panel=PANEL_TRAINING,
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="Task id. Default: Islab-Cartpole-v0.", envvar=env_var("task"), rich_help_panel=PANEL_TRAINING
        ),
    ] = None,
    num_envs: Annotated[
        int | None,
        typer.Option(
            help="Parallel environments PER RANK (total = num_envs x world size). Default: the task's, 4096.",
            envvar=env_var("num_envs"),
            rich_help_panel=PANEL_TRAINING,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Base seed; each rank uses seed + its global rank. Default: 42.",
            envvar=env_var("seed"),
            rich_help_panel=PANEL_TRAINING,
        ),
    ] = None,
    max_iterations: Annotated[
        int | None,
        typer.Option(
            help="Iterations PER RUN: every rank does this many training updates. Not rescaled when "
            "ranks are added (more ranks = more samples per update, same number of updates); see "
            "--total-env-steps for a fixed sample budget. Default: 150.",
            envvar=env_var("max_iterations"),
            rich_help_panel=PANEL_TRAINING,
        ),
    ] = None,
    total_env_steps: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Instead of --max-iterations: train until the env steps SUMMED OVER ALL RANKS reach N, "
            "i.e. ceil(N / (world size x num_envs x rollout length)) iterations, computed by the run from "
            "the world size it gets, so adding ranks keeps the sample budget. Not with --max-iterations.",
            envvar=env_var("total_env_steps"),
            rich_help_panel=PANEL_TRAINING,
        ),
    ] = None,
    # --- processes ------------------------------------------------------------------------------
    gpus: Annotated[
        str | None,
        typer.Option(
            metavar="N|all",
            help="GPU processes per node: sets --device cuda and N ranks per node ('all' = every "
            "visible GPU, honouring CUDA_VISIBLE_DEVICES).",
            envvar=env_var("gpus"),
            rich_help_panel=PANEL_PROCESSES,
        ),
    ] = None,
    device: Annotated[
        DeviceChoice | None,
        typer.Option(
            help="cuda (NCCL) or cpu (gloo). Default: cuda.", envvar=env_var("device"), rich_help_panel=PANEL_PROCESSES
        ),
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(
            help="Processes per node, e.g. --device cpu --nproc 2. Default: 1.",
            envvar=env_var("nproc"),
            rich_help_panel=PANEL_PROCESSES,
        ),
    ] = None,
    # --- cluster -----------------------------------------------------------------------------
    cluster: Annotated[
        Path | None,
        typer.Option(
            help="YAML cluster spec shared by all nodes (see configs/cluster/); options override it.",
            envvar=env_var("cluster"),
            rich_help_panel=PANEL_CLUSTER,
            dir_okay=False,
        ),
    ] = None,
    nnodes: Annotated[
        str | None,
        typer.Option(
            metavar="N|MIN:MAX",
            help="Number of nodes (machines), or MIN:MAX for elastic membership (c10d rendezvous only: "
            "training starts once MIN nodes have joined, up to MAX). Default: 1.",
            envvar=env_var("nnodes"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    node_rank: Annotated[
        int | None,
        typer.Option(
            help="This node's index in [0, nnodes). Required to launch a multi-node run; without it "
            "--dry-run prints every node's command.",
            envvar=env_var("node_rank"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    master_addr: Annotated[
        str | None,
        typer.Option(
            help="Static rendezvous: node 0's address. Default: 127.0.0.1 on one node.",
            envvar=env_var("master_addr"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    master_port: Annotated[
        int | None,
        typer.Option(
            help="Static rendezvous: node 0's port. Default: a free port on one node, 29500 on several.",
            envvar=env_var("master_port"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    rdzv_backend: Annotated[
        RdzvChoice | None,
        typer.Option(
            help="torchrun rendezvous. Default: static.", envvar=env_var("rdzv_backend"), rich_help_panel=PANEL_CLUSTER
        ),
    ] = None,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(
            help="c10d rendezvous: host:port every node can reach.",
            envvar=env_var("rdzv_endpoint"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    rdzv_id: Annotated[
        str | None,
        typer.Option(
            help="c10d rendezvous: job id shared by all nodes. Default: islab.",
            envvar=env_var("rdzv_id"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    rdzv_timeout: Annotated[
        int | None,
        typer.Option(
            metavar="SECONDS",
            help="How long node 0 waits for every node to join before failing with a clear message "
            "(torchrun static and c10d, and skrl-JAX). Default: 300.",
            envvar=env_var("rdzv_timeout"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    coordinator_address: Annotated[
        str | None,
        typer.Option(
            help="skrl-JAX only: node 0's host:port. Default: 127.0.0.1:<free port> on one node.",
            envvar=env_var("coordinator_address"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(
            help="torchrun only: restarts of the whole node group after a failure. Default: 0.",
            envvar=env_var("max_restarts"),
            rich_help_panel=PANEL_CLUSTER,
        ),
    ] = None,
    slurm: Annotated[
        bool | None,
        typer.Option(
            "--slurm/--no-slurm",
            help="Take nnodes, the node rank and node 0's address:port from the SLURM allocation "
            "(SLURM_NNODES, SLURM_NODEID, first host of SLURM_JOB_NODELIST, 20000 + SLURM_JOB_ID % 20000). "
            "On by itself under srun; options on the command line still win. [default: auto]",
            envvar=env_var("slurm"),
            rich_help_panel=PANEL_CLUSTER,
            show_default=False,
        ),
    ] = None,
    # --- output ------------------------------------------------------------------------------
    run_name: Annotated[
        str | None,
        typer.Option(
            help="Suffix of the run directory; letters, digits, . _ - only.",
            envvar=env_var("run_name"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    log_dir: Annotated[
        str | None,
        typer.Option(
            help="Root of run directories: <log_dir>/<lib>/<task>/<time>[_<run_name>]. Default: logs.",
            envvar=env_var("log_dir"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Continue a run: its run directory (training goes on there) or a checkpoint file "
            "(a new run directory). --max-iterations M more iterations (or --total-env-steps N more env "
            "steps) are trained. Only node 0 reads it.",
            envvar=env_var("resume"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    checkpoint_interval: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Iterations between checkpoints (atomic; the last iteration is always saved; 0: only "
            "at the end). An elastic restart (--max-restarts) resumes from the latest. Default: 10.",
            envvar=env_var("checkpoint_interval"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(
            help="Interpreter for the launcher and the ranks, e.g. ${ISAACSIM_PYTHON_EXE}. [default: this interpreter]",
            envvar=env_var("python"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the commands (with where each value came from) and exit.",
            envvar=env_var("dry_run"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = False,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="With --dry-run: print the plan as JSON.",
            envvar=env_var("json"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = False,
    all_ranks: Annotated[
        bool,
        typer.Option(
            "--all-ranks",
            help="Show every rank's output on the console, prefixed [rank R]. By default only rank 0's "
            "warnings/errors and the progress display are shown; every rank's full output is always in "
            "<run_dir>/logs/rank_<R>.log.",
            envvar=env_var("all_ranks"),
            rich_help_panel=PANEL_OUTPUT,
        ),
    ] = False,
) -> None:
    resolved = _resolve(ctx, gpus, cluster, slurm)
    if json_output and not dry_run:
        _fail(SpecError(Issue("--json", "only works together with --dry-run", "Add --dry-run")))
    _plan_and_go(resolved, dry_run=dry_run, json_output=json_output, all_ranks=all_ranks)


def _slurm_layer(flag: bool | None) -> Any:
    """The SLURM allocation's layer builder when SLURM mode is on (--slurm, or under srun)."""
    import os

    from islab import slurm as slurm_mode

    if flag is False or (flag is None and not slurm_mode.in_srun_step(os.environ)):
        return None
    return slurm_mode.allocation_from_environ(os.environ).layer


def _resolve(
    ctx: typer.Context, gpus: str | None, cluster: Path | None, slurm: bool | None, *, slurm_layer: Any = None
) -> ResolvedSpec:
    """Command line + ISLAB_* + cluster file (+ SLURM allocation) -> validated spec, or exit 2."""
    try:
        cli_layer, env_layer = _layers(ctx, dict(ctx.params))
        _apply_gpus(ctx, gpus, cli_layer, env_layer)
        from islab.spec import resolve_spec

        return resolve_spec(cli_layer, env_layer, cluster, slurm=slurm_layer or _slurm_layer(slurm))
    except SpecError as exc:
        _fail(exc)


def _source_of(ctx: typer.Context, name: str) -> str:
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", "DEFAULT")


def _layers(ctx: typer.Context, values: dict[str, Any]) -> tuple[dict[str, Provided], dict[str, Provided]]:
    """Split what click collected into the command-line layer and the ISLAB_* layer."""
    cli_layer: dict[str, Provided] = {}
    env_layer: dict[str, Provided] = {}
    for name, (dotted, option) in OPTION_FIELDS.items():
        value = values.get(name)
        if value is None or (name == "overrides" and not value):
            continue
        if isinstance(value, Enum):
            value = value.value
        if name == "overrides":
            value = tuple(value)
        if name == "nnodes" and value.strip().lstrip("+-").isdigit():
            value = int(value)  # "2" -> 2 (and "-1" -> -1, refused as a count); "1:2" stays text
        if _source_of(ctx, name) == "ENVIRONMENT":
            env_layer[dotted] = Provided(value, env_var(name))
        else:
            cli_layer[dotted] = Provided(value, option)
    return cli_layer, env_layer


def _apply_gpus(
    ctx: typer.Context, gpus: str | None, cli_layer: dict[str, Provided], env_layer: dict[str, Provided]
) -> None:
    """--gpus N|all is shorthand for device=cuda + nproc_per_node=N, in the layer it came from."""
    if gpus is None:
        return
    from_env = _source_of(ctx, "gpus") == "ENVIRONMENT"
    layer = env_layer if from_env else cli_layer
    label = env_var("gpus") if from_env else "--gpus"
    text = gpus.strip().lower()
    if text == "all":
        from islab.supervise import visible_gpu_count

        count = visible_gpu_count()
        if count == 0:
            raise SpecError(Issue(
                label,
                "'all' found no visible CUDA devices (CUDA_VISIBLE_DEVICES / nvidia-smi)",
                "Pass --gpus N to plan for N GPUs, or use --device cpu --nproc N",
            ))  # fmt: skip
    elif text.isdigit():
        count = int(text)
    else:
        raise SpecError(Issue(label, f"expected a number or 'all', got {gpus!r}", "Use e.g. --gpus 2 or --gpus all"))
    device = layer.get("device")
    if device is not None and device.value != "cuda":
        raise SpecError(Issue(
            label, f"GPUs were asked for together with {device.origin} {device.value}",
            "Use --gpus N for GPU ranks, or --device cpu --nproc N for CPU ranks, not both",
        ))  # fmt: skip
    if "nproc_per_node" in layer:
        raise SpecError(Issue(
            label, f"both --gpus and {layer['nproc_per_node'].origin} set the processes per node",
            "Give only one of them",
        ))  # fmt: skip
    layer["device"] = Provided("cuda", label)
    layer["nproc_per_node"] = Provided(count, label)


def _fail(exc: SpecError, code: int = 2) -> NoReturn:
    for issue in exc.issues:
        print(issue.message(), file=sys.stderr)
    raise typer.Exit(code)


def _plan_and_go(resolved: ResolvedSpec, *, dry_run: bool, json_output: bool, all_ranks: bool = False) -> None:
    from islab import plan as planner
    from islab import supervise

    spec = resolved.spec
    try:
        plan = planner.build_plan(spec, now=datetime.now(), free_port=supervise.find_free_port())
    except SpecError as exc:
        _fail(exc)

    visible_gpus = supervise.visible_gpu_count() if spec.device == "cuda" else 0
    if dry_run:
        if spec.device == "cuda" and visible_gpus < spec.nproc_per_node:
            print(
                f"warning: planning {spec.nproc_per_node} GPU process(es) per node, but "
                f"{visible_gpus} CUDA device(s) are visible here (fine for a dry run)",
                file=sys.stderr,
            )
        print(planner.format_json(plan) if json_output else planner.format_text(plan, resolved))
        raise typer.Exit(0)

    issues = planner.launch_issues(spec, platform=sys.platform, visible_gpus=visible_gpus)
    if issues:
        _fail(SpecError(issues))
    node_rank = spec.node_rank if spec.node_rank is not None else 0
    hosts_store = _preflight(spec, plan, visible_gpus)
    if spec.rendezvous.backend == "c10d" and spec.nnodes > 1 and plan.rendezvous_address:
        from islab.spec import split_host_port

        local_addr = supervise.local_address_towards(*split_host_port(plan.rendezvous_address))
        plan = planner.with_c10d_node_facts(plan, node_rank, hosts_store=hosts_store, local_addr=local_addr)

    record = {
        "spec": spec.to_plain(),
        "sources": {name: source.value for name, _, source in resolved.explain()},
        "cluster_file": resolved.cluster_file,
        "launcher": plan.launcher,
        "node_rank": spec.node_rank,  # None for a c10d node: torchrun assigns it
        "derived": dict(plan.derived),
        "argv": list(plan.node(node_rank).argv),
        "env": mask_env(plan.node(node_rank).env),
    }
    supervise.write_launch_record(plan.run_dir, record)
    where = f"node {spec.node_rank}" if spec.node_rank is not None else "this node"
    print(f"islab-train: starting {plan.launcher} on {where}; run directory: {plan.run_dir}", file=sys.stderr)
    if spec.total_env_steps is not None and plan.budget is not None:
        print(f"islab-train: {plan.budget.describe(resuming=spec.resume is not None)}", file=sys.stderr)
    first_rank = node_rank * spec.nproc_per_node
    hosts_rank0 = node_rank == 0
    console = supervise.ConsoleOptions(
        all_ranks=all_ranks,
        progress=hosts_rank0,
        live=hosts_rank0 and sys.stdout.isatty(),
        note=f"{spec.lib} · {spec.task} · {spec.nnodes * spec.nproc_per_node} rank(s) on {spec.device}",
        argv=tuple(_ARGV),
    )
    if not hosts_rank0:
        print(
            f"islab-train: node {node_rank} runs ranks {first_rank}-{first_rank + spec.nproc_per_node - 1}; "
            "progress is shown on node 0 (rank 0). Logs: "
            f"{plan.run_dir}/logs/rank_<R>.log",
            file=sys.stderr,
        )
    raise typer.Exit(supervise.run_plan(plan, node_rank, console=console))


def _preflight(spec: RunSpec, plan: LaunchPlan, visible_gpus: int) -> bool:
    """The cheap doctor checks before a real launch: errors stop it (exit 2), warnings print.
    Returns whether this node owns the c10d endpoint's address (it must host the store)."""
    from islab import doctor

    facts = doctor.gather_facts(spec, plan, full=False, visible_gpus=visible_gpus)
    errors, warnings = doctor.launch_messages(doctor.run_checks(facts, doctor.CHEAP))
    for line in warnings + errors:
        print(line, file=sys.stderr)
    if errors:
        print(f"islab-train: nothing was started; '{PROG} doctor' with the same options checks more.", file=sys.stderr)
        raise typer.Exit(2)
    rdzv = facts.rendezvous
    return bool(rdzv and rdzv.kind == "c10d endpoint" and rdzv.listens)


# ----------------------------------------------------------------------------------------------
# Subcommands: doctor, sbatch, tasks
# ----------------------------------------------------------------------------------------------
#
# The training command takes trailing KEY=VALUE arguments, which a click group cannot combine with
# subcommand names; so `run()` dispatches on the first argument instead. `doctor` and `sbatch`
# accept the training command's spec options: their signatures are built from `train`'s, so
# option names, help, environment variables and validation stay one definition.

SUBCOMMANDS = ("doctor", "sbatch", "tasks")
PANEL_DOCTOR = "Doctor"
PANEL_SBATCH = "Batch script"

commands = typer.Typer(
    name=PROG,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)


def _with_spec_options(*, exclude: tuple[str, ...] = (), own: tuple[inspect.Parameter, ...] = ()) -> Any:
    """Give a ``(ctx, **options)`` command the training command's spec options plus ``own``."""

    def decorate(func: Any) -> Any:
        shared = [
            parameter
            for name, parameter in inspect.signature(train, eval_str=True).parameters.items()
            if name not in NOT_SPEC_OPTIONS and name not in exclude and name != "ctx"
        ]
        context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        func.__signature__ = inspect.Signature([context, *shared, *own])
        return func

    return decorate


def _own_option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


JSON_OPTION = _own_option(
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

Exit codes: 0 no check failed (warnings allowed), 1 a check failed, 2 the options are wrong.
islab-train runs the cheap checks (interfaces, address, port, disk) before every real launch.
"""


@commands.command(
    "doctor",
    epilog=DOCTOR_EPILOG,
    help="Check this node before launching: GPUs vs processes, NCCL/gloo, the rendezvous address "
    "and port, NCCL_/GLOO_SOCKET_IFNAME, library versions, driver vs torch CUDA, disk, OS. "
    "Takes the same options as a launch.",
)
@_with_spec_options(own=(JSON_OPTION,))
def doctor_command(ctx: typer.Context, **options: Any) -> None:
    from islab import doctor, supervise
    from islab import plan as planner

    resolved = _resolve(ctx, options["gpus"], options["cluster"], options["slurm"])
    spec = resolved.spec
    try:
        plan = planner.build_plan(spec, now=datetime.now(), free_port=supervise.find_free_port())
    except SpecError as exc:
        _fail(exc)
    facts = doctor.gather_facts(spec, plan, full=True)
    checks = doctor.run_checks(facts)
    if options["json_output"]:
        print(doctor.to_json(checks, facts))
    else:
        from rich.console import Console

        doctor.render_table(checks, facts, Console(highlight=False, width=None if sys.stdout.isatty() else 140))
    raise typer.Exit(0 if doctor.all_passed(checks) else 1)


SBATCH_OPTIONS = (
    _own_option(
        "partition",
        Annotated[str | None, typer.Option(help="#SBATCH --partition.", rich_help_panel=PANEL_SBATCH)],
        None,
    ),
    _own_option(
        "time",
        Annotated[
            str | None,
            typer.Option(help="#SBATCH --time, e.g. 02:00:00.", rich_help_panel=PANEL_SBATCH),
        ],
        None,
    ),
    _own_option(
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
    _own_option(
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

Every node runs `islab-train --slurm ...` with the options given here; nnodes, the node rank and
node 0's address:port come from the allocation. The job's output goes to
<log_dir>/slurm-<job name>-<job id>.out (the log directory is created now).
"""


@commands.command(
    "sbatch",
    epilog=SBATCH_EPILOG,
    help="Print a SLURM batch script that runs this training on --nnodes nodes (one "
    "islab-train --slurm per node, started by srun). Usage: islab-train sbatch ... > job.sh && sbatch job.sh",
)
@_with_spec_options(exclude=("slurm", "node_rank"), own=SBATCH_OPTIONS)
def sbatch_command(ctx: typer.Context, **options: Any) -> None:
    from islab import slurm as slurm_mode

    def planned_allocation(chosen: Any) -> Any:
        nnodes = chosen.get("nnodes", 1)
        nnodes = nnodes if isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes > 0 else 1
        hosts = tuple(f"node{index}" for index in range(nnodes))
        return slurm_mode.Allocation(1, nnodes, 0, hosts, "SLURM_JOB_NODELIST", "SLURM_NNODES").layer(chosen)

    resolved = _resolve(ctx, options["gpus"], options["cluster"], None, slurm_layer=planned_allocation)
    spec = resolved.spec
    log_dir = Path(spec.log_dir).absolute()
    gpus_per_node = spec.nproc_per_node if spec.device == "cuda" else 0
    cpus = options["cpus_per_task"] or (spec.nproc_per_node if spec.device == "cpu" else 4 * spec.nproc_per_node)
    batch = slurm_mode.BatchOptions(
        nodes=spec.nnodes,
        job_name=options["job_name"] or f"islab-{spec.lib}",
        output=str(log_dir / "slurm-%x-%j.out"),
        cpus_per_task=cpus,
        gpus_per_node=gpus_per_node,
        partition=options["partition"],
        time=options["time"],
    )
    issues = slurm_mode.batch_option_issues(batch)
    if issues:
        _fail(SpecError(issues))
    node_command = [spec.python, "-m", "islab.cli", "--slurm", *_forwarded_options(ctx, options, log_dir)]
    log_dir.mkdir(parents=True, exist_ok=True)
    print(slurm_mode.sbatch_script(batch, node_command), end="", flush=True)
    print(f"islab-train: batch script for {spec.nnodes} node(s); job output goes to {batch.output}", file=sys.stderr)


def _forwarded_options(ctx: typer.Context, options: dict[str, Any], log_dir: Path) -> list[str]:
    """The options typed for `sbatch` that each node's `islab-train --slurm` must get too
    (ISLAB_* variables reach the nodes through sbatch's default --export=ALL)."""
    args: list[str] = []
    for name, (_, option) in OPTION_FIELDS.items():
        value = options.get(name)
        if name in {"overrides", "nnodes"} or value is None or _source_of(ctx, name) != "COMMANDLINE":
            continue
        if name == "log_dir":
            value = str(log_dir)
        args += [option, value.value if isinstance(value, Enum) else str(value)]
    for name, option in (("gpus", "--gpus"), ("cluster", "--cluster")):
        value = options.get(name)
        if value is not None and _source_of(ctx, name) == "COMMANDLINE":
            args += [option, str(Path(value).absolute()) if name == "cluster" else str(value)]
    return args + list(options.get("overrides") or ())


@commands.command("tasks", help="List the registered tasks, their sizes, and which libraries have agent configs.")
def tasks_command(
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    from islab.tasks import TASKS, agent_config_path, libraries_with_agent_config

    rows = [
        {
            "task": info.task_id,
            "observation_size": info.observation_size,
            "action_size": info.action_size,
            "default_num_envs": info.default_num_envs,
            "agent_configs": libraries_with_agent_config(task_id),
        }
        for task_id, info in TASKS.items()
    ]
    if json_output:
        import json

        print(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="islab-train tasks", title_justify="left")
    for column in ("task", "obs", "actions", "default num_envs", "agent configs (--lib)"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["task"], str(row["observation_size"]), str(row["action_size"]), str(row["default_num_envs"]),
            ", ".join(row["agent_configs"]) or "none",
        )  # fmt: skip
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    console.print(table)
    example = next(iter(TASKS))
    console.print(f"Agent configs live in {agent_config_path('rsl_rl', example).parent.parent}/<lib>/<task>.yaml")


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------


def lookalike_dash_issue(args: list[str]) -> Issue | None:
    """An argument typed with an en/em dash instead of "--" (copy-pasted from typeset docs)."""
    for arg in args:
        if arg and arg[0] in LOOKALIKE_DASHES:
            name = arg.lstrip(LOOKALIKE_DASHES + "-")
            meant = f"--{name}" if len(name.split("=")[0]) > 1 else f"-{name}"
            return Issue(
                f"argument {arg!r}",
                f"starts with the typographic dash {arg[0]!r} (U+{ord(arg[0]):04X}), not '--'",
                f"did you mean {meant}? Retype the dashes as two ASCII hyphens",
            )
    return None


CHOICE_ENUMS: dict[str, type[Enum]] = {
    "lib": LibChoice,
    "ml_framework": FrameworkChoice,
    "device": DeviceChoice,
    "rdzv_backend": RdzvChoice,
}


def _bad_parameter_issue(exc: Any) -> Issue:
    """click/typer's "Invalid value for ..." -> our one-line error with the field and a fix."""
    from islab.spec import suggest

    param = exc.param
    name = getattr(param, "name", None) or "value"
    option = max(getattr(param, "opts", None) or [name], key=len)
    label = option
    if exc.ctx is not None and _source_of(exc.ctx, name) == "ENVIRONMENT":
        label = f"{option} (from {env_var(name)})"
    cause = exc.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    raw = errors[0].get("input") if errors else None
    if name in CHOICE_ENUMS and raw is not None:
        choices = [member.value for member in CHOICE_ENUMS[name]]
        hint = suggest(str(raw), choices)
        if name == "device" and str(raw).lower().startswith("gpu"):
            hint = "did you mean 'cuda'? (or --gpus N)"
        return Issue(
            label, f"{raw!r} is not one of {', '.join(choices)}", hint or f"Choose one of {', '.join(choices)}"
        )
    if raw is not None and errors and errors[0].get("type", "").startswith("int"):
        return Issue(label, f"expected a whole number, got {raw!r}", f"Give a number, e.g. {option} 2")
    message = " ".join(str(exc.message).split()).rstrip(".")
    return Issue(label, message, f"Run '{PROG} --help' for the accepted values")


def _wants_subcommand(args: list[str]) -> bool:
    """`islab-train doctor ...` etc. (also while the shell completes such a command line)."""
    import os

    if args and args[0] in SUBCOMMANDS:
        return True
    words = (os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS") or "").split()
    return len(words) > 1 and words[1] in SUBCOMMANDS


def run(argv: list[str] | None = None) -> int:
    """Parse and execute; return the exit status (tests call this in-process)."""
    from typer._click import exceptions as click_exceptions  # typer vendors click

    args = list(sys.argv[1:] if argv is None else argv)
    dash = lookalike_dash_issue(args)
    if dash is not None:
        print(dash.message(), file=sys.stderr)
        return 2
    _ARGV[:] = args
    command = typer.main.get_command(commands if _wants_subcommand(args) else app)
    try:
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except typer.BadParameter as exc:
        print(_bad_parameter_issue(exc).message(), file=sys.stderr)
        return 2
    except click_exceptions.UsageError as exc:
        message = " ".join(exc.format_message().split()).rstrip(".")
        print(f"error: {message}. Run '{PROG} --help' for the options.", file=sys.stderr)
        return 2
    except typer.Abort:
        return 130
    return result if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
