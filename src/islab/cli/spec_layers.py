"""What the user typed -> spec layers -> a resolved spec, or exit 2 (the CLI's half of resolution).

click collects the options of the option table (:mod:`islab.cli.options`); this module splits them
by where each came from -- the command line or an ``ISLAB_*`` variable -- into two layers, expands
``--gpus N|all`` into the device and the processes per node, adds the scheduler allocations this
process runs in, and hands everything to :func:`islab.resolve.resolve.resolve_spec`. A mistake the
user can fix leaves as one ``error:`` line per issue with exit code 2 (:func:`fail`, :func:`checked`).

It also holds what :func:`islab.cli.run` takes off the command line before click parses the rest:
the arguments after ``--`` (:data:`ENTRY_ARGS`) and ``--num-envs auto`` (:data:`NUM_ENVS_AUTO`).
Read them at call time (``spec_layers.ENTRY_ARGS``, :func:`entry_args`): ``run`` sets them per call.
Every subcommand that resolves like a launch (``sbatch``, ``k8s``, ``fit``, ``doctor``) comes here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from enum import Enum
from typing import Any, NoReturn, TypeVar

import typer

from islab.cli.launch_checks import preflight_options
from islab.cli.options import BY_NAME, OPTIONS
from islab.doctor.probes import visible_gpu_count
from islab.resolve.allocations import active_allocations
from islab.resolve.edge import DryRunEdge
from islab.resolve.resolve import Provided, ResolvedSpec, resolve_spec
from islab.spec.issues import Issue, SpecError

# The arguments after `--` (None: no `--` was given), set by islab.cli.run before click parses the rest.
ENTRY_ARGS: list[str] | None = None

# `--num-envs auto` was given (set by islab.cli.run, which takes the word off before parsing).
NUM_ENVS_AUTO = False

T = TypeVar("T")
GPUS_ALL_ASSUMED = "no CUDA device is visible here, so this plan assumes 1 GPU per node"


def entry_args() -> list[str] | None:
    """The arguments after `--` of the command being run (read at call time: run() sets them)."""
    return ENTRY_ARGS


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
        cli_layer, env_layer = option_layers(ctx, options)
        apply_gpus(ctx, options.get("gpus"), cli_layer, env_layer, dry_run_warnings)
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


def option_layers(ctx: typer.Context, values: dict[str, Any]) -> tuple[dict[str, Provided], dict[str, Provided]]:
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


def apply_gpus(
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
