"""The training command: options -> spec -> plan -> printed (``--dry-run``) or launched.

The command line only translates: options and ``ISLAB_*`` variables (one table, :mod:`islab.cli.options`)
become spec layers (:func:`islab.resolve.resolve.resolve_spec` merges and validates them), the spec
becomes a plan (:func:`islab.plan.plan.build_plan`), and the plan is printed (``--dry-run``) or
run (:func:`islab.run.supervise.run_plan`). Every failure the user can fix is one line on
stderr, ``error: <field>: <what is wrong>. <fix>.``, with exit code 2 and no traceback.

Exit codes: 0 success (or a dry run); 2 the spec or command line is wrong, nothing started;
otherwise the training's own status (a failed rank gives non-zero; death by signal N gives 128+N;
islab-train itself stopped by SIGINT exits 130; preempted by SIGTERM/SIGUSR1 and checkpointed, 75).

Keep imports light: ``--help``, ``--dry-run`` and spec errors must not import torch, numpy or any
RL library (CI runs them constantly). typer does not import rich until help is rendered.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer

from islab.cli.launch_checks import (
    PreflightOptions,
    claim_run_dir,
    doctor_checks,
    nothing_to_train,
    preflight_before_training,
    preflight_options,
    run_dir_taken,
)
from islab.cli.options import BY_NAME, OPTIONS, PROG, signature
from islab.doctor.probes import find_free_port, local_address_towards, visible_gpu_count
from islab.fit.auto import apply_auto
from islab.k8s import allocation as k8s_allocation
from islab.k8s import dns as k8s_dns
from islab.plan import plan as planner
from islab.plan.dry_run import format_json, format_text
from islab.plan.launch_issues import launch_issues
from islab.plan.launch_plan import LaunchPlan
from islab.plan.nccl import with_nccl_settings
from islab.plan.placement import camera_warning
from islab.plan.preflight import wants_preflight
from islab.plan.torchrun import with_c10d_node_facts
from islab.resolve.allocations import active_allocations
from islab.resolve.edge import DryRunEdge
from islab.resolve.resolve import Provided, ResolvedSpec, Source, resolve_spec
from islab.run.supervise import ConsoleOptions, run_plan
from islab.run.wandb_login import wandb_login_issue
from islab.rundir import (
    rank_log,
    write_launch_record,
)
from islab.sky import allocation as sky_allocation
from islab.spec.addresses import split_host_port
from islab.spec.issues import Issue, SpecError, mask_env

# The arguments after `--` (None: no `--` was given), set by islab.cli.run before click parses the rest.
ENTRY_ARGS: list[str] | None = None


# `--num-envs auto` was given (set by islab.cli.run, which takes the word off before parsing).
NUM_ENVS_AUTO = False


def entry_args() -> list[str] | None:
    """The arguments after `--` of the command being run (read at call time: run() sets them)."""
    return ENTRY_ARGS


T = TypeVar("T")
NO_CHECK_OPTIONS = PreflightOptions()  # the defaults: pre-flight on, 60 s
GPUS_ALL_ASSUMED = "no CUDA device is visible here, so this plan assumes 1 GPU per node"

# The subcommands beside the training command (islab.cli.commands registers each; --help lists them).
SUBCOMMANDS = ("doctor", "sbatch", "k8s", "sky", "tasks", "play", "eval", "export", "sweep", "fit")

EPILOG = f"""\
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
  islab-train --python ${{ISAACSIM_PYTHON_EXE}} --gpus all

  [dim]# check this node first (GPUs, NCCL, address/port, interfaces, versions, driver, disk)[/dim]
  islab-train doctor --cluster configs/cluster/two-node-static.yaml --node-rank 1

  [dim]# SLURM: write a batch script, submit it (each node runs islab-train --slurm)[/dim]
  islab-train sbatch --nnodes 2 --gpus 4 --partition gpu > job.sh && sbatch job.sh

  [dim]# see every rank's output, prefixed \\[rank R] (default: progress + rank 0's errors)[/dim]
  islab-train --device cpu --nproc 2 --all-ranks

  [dim]# which tasks exist, and for which libraries[/dim]
  islab-train tasks

Commands: islab-train {" | ".join(SUBCOMMANDS)} (each has --help; islab-train help COMMAND too).
Version: islab-train --version (-V), with torch's and the libraries'.
Precedence: command line > SLURM / Kubernetes / SkyPilot allocation (--slurm, --k8s, --sky) > ISLAB_* environment
> --cluster YAML > defaults.
Exit codes: 0 ok / dry run, 2 bad spec (nothing started), else the training's status
(signal N -> 128+N; Ctrl-C -> 130; SIGTERM/SIGUSR1 -> checkpoint, then 75). Reference: docs/CLI.md.
"""


def typer_app(**settings: Any) -> typer.Typer:
    """A Typer app with islab-train's settings (``-h``, Rich markup, no pretty tracebacks)."""
    return typer.Typer(
        name=PROG, rich_markup_mode="rich", context_settings={"help_option_names": ["-h", "--help"]},
        pretty_exceptions_enable=False, **settings,
    )  # fmt: skip


app = typer_app(add_completion=True)


def train(ctx: typer.Context, **options: Any) -> None:
    warnings: list[str] = []  # what a dry run planned without checking it on this machine
    resolved = resolve(ctx, options, dry_run_warnings=warnings if options["dry_run"] else None)
    if NUM_ENVS_AUTO:  # --num-envs auto: fit's recommendation, cached or measured now (islab.fit.auto)
        resolved = checked(lambda: apply_auto(resolved, dry_run=options["dry_run"], warnings=warnings))
    if options["json_output"] and not options["dry_run"]:
        fail(SpecError(Issue("--json", "only works together with --dry-run", "Add --dry-run")))
    checks = checked(preflight_options, options)
    _plan_and_go(resolved, dry_run=options["dry_run"], json_output=options["json_output"],
                 all_ranks=options["all_ranks"], warnings=warnings, checks=checks)  # fmt: skip


train.__signature__ = signature(train=True)  # type: ignore[attr-defined]
app.command(
    epilog=EPILOG,
    help="Launch distributed RL training (rl_games, rsl_rl, skrl) on a workstation, a cluster "
    "or CPU ranks, or print the plan with --dry-run.\n\n"
    "Trailing KEY=VALUE items override the agent config (dotted keys, values parsed as YAML).",
)(train)


# ----------------------------------------------------------------------------------------------
# Options -> spec layers
# ----------------------------------------------------------------------------------------------


def resolve(
    ctx: typer.Context,
    options: dict[str, Any],
    *,
    slurm_layer: Any = None,
    dry_run_warnings: list[str] | None = None,
    elsewhere: bool = False,
) -> ResolvedSpec:
    """Command line + ISLAB_* + cluster file (+ SLURM allocation) -> validated spec, or exit 2.
    ``dry_run_warnings``: given for a dry run, which then plans what this machine cannot check
    (``--gpus all`` without GPUs, ``--isaaclab`` without a checkout) and says so in this list.
    ``elsewhere``: a job written here for other machines (``sbatch``, ``k8s``), whose nodes resolve it
    again: an ``--isaaclab`` this machine cannot read is planned unchecked, with a warning on stderr."""
    dry_run = dry_run_warnings is not None
    try:
        cli_layer, env_layer = _layers(ctx, options)
        _apply_gpus(ctx, options.get("gpus"), cli_layer, env_layer, dry_run_warnings)
        # The scheduler allocations this process runs in (SLURM under srun or with --slurm; Kubernetes in
        # the pods of a training job or with --k8s: islab.resolve.allocations), unless
        # the caller plans one itself (sbatch plans the job's allocation before it exists).
        allocations = active_allocations(options, os.environ) if slurm_layer is None else ()
        edge = DryRunEdge() if dry_run or elsewhere else None
        # With the pre-flight on, the nodes compare what they must share before training (field by field).
        compared = preflight_options(options).mode != "off"
        resolved = resolve_spec(cli_layer, env_layer, options.get("cluster"), slurm=slurm_layer,
                                allocations=allocations, edge=edge, nodes_compared=compared)  # fmt: skip
        if edge is not None and dry_run_warnings is not None:
            dry_run_warnings += edge.warnings
        elif edge is not None:
            for line in edge.warnings:
                print(line, file=sys.stderr)
        return resolved
    except SpecError as exc:
        fail(exc)


def source_of(ctx: typer.Context, name: str) -> str:
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", "DEFAULT")


def _layers(ctx: typer.Context, values: dict[str, Any]) -> tuple[dict[str, Provided], dict[str, Provided]]:
    """Split what click collected into the command-line layer and the ISLAB_* layer."""
    cli_layer: dict[str, Provided] = {}
    env_layer: dict[str, Provided] = {}
    overrides = values.get("overrides")
    if overrides:
        cli_layer["overrides"] = Provided(tuple(overrides), "KEY=VALUE")
    if ENTRY_ARGS is not None:  # everything after `--`, verbatim: replaces the YAML `args`
        cli_layer["args"] = Provided(tuple(ENTRY_ARGS), "--")
    entry = [option for option in OPTIONS if option.field == "entrypoint" and values.get(option.name) is not None]
    if len(entry) > 1:
        raise SpecError(Issue(" / ".join(option.flag for option in entry), "give only one entry point",
                              "Keep one of --script, --module, --command"))  # fmt: skip
    for option in OPTIONS:
        value = values.get(option.name)
        if option.field is None or value is None or (option.is_flag and value is False):
            continue
        if isinstance(value, Enum):
            value = value.value
        if option.field == "entrypoint":
            value = {option.name: value}
        if option.name == "nnodes" and value.strip().lstrip("+-").isdigit():
            value = int(value)  # "2" -> 2 (and "-1" -> -1, refused as a count); "1:2" stays text
        if source_of(ctx, option.name) == "ENVIRONMENT":
            env_layer[option.field] = Provided(value, option.envvar)
        else:
            cli_layer[option.field] = Provided(value, option.flag)
    return cli_layer, env_layer


def run_leaf_of(resolved: ResolvedSpec) -> str | None:
    """The run directory's leaf when a scheduler allocation supplied part of the spec -- the SLURM
    job (slurm-<id>), the Kubernetes job (k8s-<name>) or the SkyPilot task (its task id) -- so that a
    requeued job, a pod started again or a recovered managed job finds its checkpoint."""
    used = set(resolved.sources.values())
    if Source.K8S in used:
        return k8s_allocation.allocation_from_environ(os.environ).run_leaf
    if Source.SKY in used:  # the task id: the same in every recovery of a managed job
        return sky_allocation.allocation_from_environ(os.environ).run_leaf
    if Source.SLURM in used:
        return f"slurm-{int(os.environ['SLURM_JOB_ID'])}"
    return None


def _apply_gpus(
    ctx: typer.Context,
    gpus: str | None,
    cli_layer: dict[str, Provided],
    env_layer: dict[str, Provided],
    dry_run_warnings: list[str] | None = None,
) -> None:
    """--gpus N|all is shorthand for device=cuda + nproc_per_node=N, in the layer it came from.
    A dry run on a machine without GPUs plans ``all`` as one GPU per node (the world size, the
    budget and skrl-JAX's per-rank commands need a number; one is the smallest real plan) and warns."""
    if gpus is None:
        return
    from_env = source_of(ctx, "gpus") == "ENVIRONMENT"
    layer = env_layer if from_env else cli_layer
    label = BY_NAME["gpus"].envvar if from_env else "--gpus"
    text = gpus.strip().lower()
    if text == "all":
        count = visible_gpu_count()
        if count == 0 and dry_run_warnings is not None:
            count = 1
            dry_run_warnings.append(f"warning: {label} all: {GPUS_ALL_ASSUMED} (a real launch counts the node's GPUs)")
        elif count == 0:
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


def checked(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, or exit 2 with its SpecError's messages."""
    try:
        return function(*args)
    except SpecError as exc:
        fail(exc)


def fail(exc: SpecError, code: int = 2) -> NoReturn:
    for issue in exc.issues:
        print(issue.message(), file=sys.stderr)
    raise typer.Exit(code)


# ----------------------------------------------------------------------------------------------
# Plan, check, launch
# ----------------------------------------------------------------------------------------------


def plan_for(
    resolved: ResolvedSpec, checks: PreflightOptions, *, now: datetime | None = None, free_port: int | None = None,
    run_dir: str | None = None,
) -> LaunchPlan:  # fmt: skip
    """The spec's plan, with the NCCL settings the launch adds (flight recorder, --nccl-safe), or exit 2.
    ``now`` and ``free_port`` default to the clock and a probed port; a plan made again for the
    directory this launch claimed (``run_dir``) passes the first plan's."""
    now = now or datetime.now()
    free_port = free_port or find_free_port()
    try:
        plan = planner.build_plan(resolved.spec, now=now, free_port=free_port, job_leaf=run_leaf_of(resolved),
                                  to_target=planner.resumes_to_target(resolved), run_dir=run_dir)  # fmt: skip
    except SpecError as exc:
        fail(exc)
    return with_nccl_settings(plan, resolved.spec, safe=checks.nccl_safe, inherited=os.environ)


def _plan_and_go(
    resolved: ResolvedSpec, *, dry_run: bool, json_output: bool, all_ranks: bool = False,
    warnings: Sequence[str] = (), checks: PreflightOptions = NO_CHECK_OPTIONS,
) -> None:  # fmt: skip
    spec = resolved.spec
    now, free_port = datetime.now(), find_free_port()
    plan = plan_for(resolved, checks, now=now, free_port=free_port)

    # The ranks get the spec's env on top of ours: count the GPUs they will see.
    visible_gpus = visible_gpu_count({**os.environ, **spec.env}) if spec.device == "cuda" else 0
    placement = [line for line in (camera_warning(spec, os.environ),) if line]
    if dry_run:
        for line in [*warnings, *placement]:
            print(line, file=sys.stderr)
        gpus_assumed = any(GPUS_ALL_ASSUMED in line for line in warnings)  # said once already
        if spec.device == "cuda" and visible_gpus < spec.nproc_per_node and not gpus_assumed:
            print(
                f"warning: planning {spec.nproc_per_node} GPU process(es) per node, but "
                f"{visible_gpus} CUDA device(s) are visible here (fine for a dry run)",
                file=sys.stderr,
            )
        print(format_json(plan) if json_output else format_text(plan, resolved))
        raise typer.Exit(0)

    finished = nothing_to_train(spec, plan)
    if finished is not None:
        print(finished, file=sys.stderr)
        raise typer.Exit(0)
    defaulted = resolved.sources.get("device", Source.DEFAULT) == Source.DEFAULT  # nothing chose cuda
    issues = launch_issues(
        spec, platform=sys.platform, visible_gpus=visible_gpus, environ=os.environ, device_defaulted=defaulted
    )
    taken = run_dir_taken(spec, plan, run_leaf_of(resolved), now=time.time())
    login = wandb_login_issue({**os.environ, **spec.env}, Path.home()) if spec.logger == "wandb" else None
    refused = [*issues, *(issue for issue in (taken, login) if issue is not None)]
    if refused:
        fail(SpecError(refused))
    for line in placement:
        print(line, file=sys.stderr)
    node_rank = spec.node_rank if spec.node_rank is not None else 0
    if plan.rendezvous_address and str(run_leaf_of(resolved)).startswith("k8s-"):
        k8s_dns.wait_for_dns(split_host_port(plan.rendezvous_address)[0], plan.rendezvous_timeout_s)
    hosts_store = doctor_checks(spec, plan, visible_gpus)
    if spec.rendezvous.backend == "c10d" and spec.nnodes > 1 and plan.rendezvous_address:
        local_addr = local_address_towards(*split_host_port(plan.rendezvous_address))
        plan = with_c10d_node_facts(plan, node_rank, hosts_store=hosts_store, local_addr=local_addr)
    claimed = claim_run_dir(spec, plan, run_leaf_of(resolved))
    if claimed is not None and claimed != plan.run_dir:  # another launch took the name this second
        plan = plan_for(resolved, checks, now=now, free_port=free_port, run_dir=claimed)

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
    write_launch_record(plan.run_dir, record)
    if wants_preflight(spec, checks.mode):
        status = preflight_before_training(spec, plan, node_rank, checks, claimed=claimed is not None)
        if status is not None:
            raise typer.Exit(status)
    elif checks.mode == "only":
        print("islab-train: --preflight only: a single rank has no collectives to check", file=sys.stderr)
        raise typer.Exit(0)
    where = f"node {spec.node_rank}" if spec.node_rank is not None else "this node"
    run_dir = os.path.abspath(plan.run_dir)  # printed paths work from wherever the user stands
    print(f"islab-train: starting {plan.launcher} on {where}; run directory: {run_dir}", file=sys.stderr)
    if spec.total_env_steps is not None and plan.budget is not None:
        print(f"islab-train: {plan.budget.describe(resuming=spec.resume is not None)}", file=sys.stderr)
    first_rank = node_rank * spec.nproc_per_node
    hosts_rank0 = node_rank == 0
    console = ConsoleOptions(
        all_ranks=all_ranks,
        progress=hosts_rank0,
        live=hosts_rank0 and sys.stdout.isatty(),
        note=f"{spec.lib} · {spec.task} · {spec.nnodes * spec.nproc_per_node} rank(s) on {spec.device}",
    )
    if not hosts_rank0:
        print(
            f"islab-train: node {node_rank} runs ranks {first_rank}-{first_rank + spec.nproc_per_node - 1}; "
            "progress is shown on node 0 (rank 0). Logs: "
            f"{os.path.abspath(rank_log(plan.run_dir, 0).parent)}/rank_<R>.log",
            file=sys.stderr,
        )
    raise typer.Exit(run_plan(plan, node_rank, console=console))
