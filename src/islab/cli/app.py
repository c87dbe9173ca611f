"""The training command: options -> spec -> plan -> printed (``--dry-run``) or launched.

The command line only translates: options and ``ISLAB_*`` variables (one table, :mod:`islab.cli.options`)
become spec layers (:mod:`islab.cli.spec_layers`; :func:`islab.resolve.resolve.resolve_spec` merges
and validates them), the spec becomes a launch (:func:`islab.plan.launch.plan_launch`, over the facts
this edge gathers: the clock, a free port, the environment), and its plan is printed (``--dry-run``)
or run (:func:`islab.run.supervise.run_plan`). Every failure the user can fix is one line on stderr,
``error: <field>: <what is wrong>. <fix>.``, with exit code 2 and no traceback.

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
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

import islab.cli.spec_layers as spec_layers  # the module: its switches are read at call time
from islab.cli.launch_checks import (
    PreflightOptions,
    claim_run_dir,
    doctor_checks,
    nothing_to_train,
    preflight_before_training,
    preflight_options,
    run_dir_taken,
)
from islab.cli.options import PROG, signature
from islab.cli.spec_layers import GPUS_ALL_ASSUMED, checked, fail, resolve
from islab.doctor.probes import find_free_port, local_address_towards, visible_gpu_count
from islab.fit.auto import apply_auto
from islab.k8s import dns as k8s_dns
from islab.plan.dry_run import format_json, format_text
from islab.plan.launch import Launch, LaunchFacts, plan_launch
from islab.plan.launch_issues import launch_issues
from islab.plan.launch_plan import LaunchPlan
from islab.plan.preflight import wants_preflight
from islab.resolve.resolve import ResolvedSpec, Source
from islab.run.supervise import ConsoleOptions, run_plan
from islab.run.wandb_login import wandb_login_issue
from islab.rundir import (
    rank_log,
    write_launch_record,
)
from islab.spec.addresses import split_host_port
from islab.spec.issues import Issue, SpecError, mask_env

NO_CHECK_OPTIONS = PreflightOptions()  # the defaults: pre-flight on, 60 s

# The subcommands beside the training command (islab.cli.commands registers each; --help lists them).
SUBCOMMANDS = ("doctor", "sbatch", "k8s", "sky", "tasks", "play", "eval", "export", "sweep", "fit", "scale")

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
    # --num-envs auto / num_envs: auto in a cluster file: fit's recommendation, cached or measured now (islab.fit.auto)
    if spec_layers.NUM_ENVS_AUTO or resolved.num_envs_auto:
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
# Plan, check, launch
# ----------------------------------------------------------------------------------------------


def edge_facts(checks: PreflightOptions, run_dir: str | None = None) -> LaunchFacts:
    """What this machine and moment give the planner: the clock, a probed port, this process's
    environment; ``run_dir``: a directory the caller claimed."""
    return LaunchFacts(datetime.now(), find_free_port(), os.environ, nccl_safe=checks.nccl_safe, run_dir=run_dir)


def launch_for(resolved: ResolvedSpec, checks: PreflightOptions, facts: LaunchFacts | None = None) -> Launch:
    """The launch of the spec (:func:`islab.plan.launch.plan_launch`), or exit 2. ``facts``: the
    edge's (:func:`edge_facts` by default)."""
    facts = facts or edge_facts(checks)
    try:
        return plan_launch(resolved, facts)
    except SpecError as exc:
        fail(exc)


def plan_for(resolved: ResolvedSpec, checks: PreflightOptions, *, run_dir: str | None = None) -> LaunchPlan:
    """The spec's plan as a launch runs it (``doctor --collectives`` checks that one), or exit 2;
    ``run_dir``: a directory the caller claimed (``scale``'s run per rank count)."""
    return launch_for(resolved, checks, edge_facts(checks, run_dir)).plan


def _plan_and_go(
    resolved: ResolvedSpec, *, dry_run: bool, json_output: bool, all_ranks: bool = False,
    warnings: Sequence[str] = (), checks: PreflightOptions = NO_CHECK_OPTIONS,
) -> None:  # fmt: skip
    spec = resolved.spec
    facts = edge_facts(checks)
    launch = launch_for(resolved, checks, facts)
    plan = launch.plan

    # The ranks get the spec's env on top of ours: count the GPUs they will see.
    visible_gpus = visible_gpu_count({**os.environ, **spec.env}) if spec.device == "cuda" else 0
    if dry_run:
        for line in [*warnings, *launch.warnings]:
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
    job_leaf = resolved.job.run_leaf if resolved.job is not None else None  # a scheduler job's own directory
    taken = run_dir_taken(spec, plan, job_leaf, now=time.time())
    login = wandb_login_issue({**os.environ, **spec.env}, Path.home()) if spec.logger == "wandb" else None
    refused = [*issues, *(issue for issue in (taken, login) if issue is not None)]
    if refused:
        fail(SpecError(refused))
    for line in launch.warnings:
        print(line, file=sys.stderr)
    node_rank = spec.node_rank if spec.node_rank is not None else 0
    if launch.dns_host is not None:  # a Kubernetes job's node 0: its name exists once its pod runs
        k8s_dns.wait_for_dns(launch.dns_host, plan.rendezvous_timeout_s)
    hosts_store = doctor_checks(spec, plan, visible_gpus)
    # What only this node knows (a c10d node's store and address), and the directory it claimed:
    # the same facts plus those, planned again by the same function.
    if spec.rendezvous.backend == "c10d" and spec.nnodes > 1 and plan.rendezvous_address:
        local_addr = local_address_towards(*split_host_port(plan.rendezvous_address))
        facts = replace(facts, hosts_store=hosts_store, local_addr=local_addr)
    claimed = claim_run_dir(spec, plan, job_leaf)
    if claimed is not None and claimed != plan.run_dir:  # another launch took the name this second
        facts = replace(facts, run_dir=claimed)
    if facts.hosts_store is not None or facts.run_dir is not None:
        plan = launch_for(resolved, checks, facts).plan

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
