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

import sys
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from islab.spec import Issue, Provided, SpecError, mask_env

if TYPE_CHECKING:
    from islab.spec import ResolvedSpec

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

Precedence: command line > ISLAB_* environment > --cluster YAML > defaults.
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
    "device": ("device", "--device"),
    "nproc": ("nproc_per_node", "--nproc"),
    "nnodes": ("nnodes", "--nnodes"),
    "node_rank": ("node_rank", "--node-rank"),
    "master_addr": ("rendezvous.master_addr", "--master-addr"),
    "master_port": ("rendezvous.master_port", "--master-port"),
    "rdzv_backend": ("rendezvous.backend", "--rdzv-backend"),
    "rdzv_endpoint": ("rendezvous.endpoint", "--rdzv-endpoint"),
    "rdzv_id": ("rendezvous.id", "--rdzv-id"),
    "coordinator_address": ("coordinator_address", "--coordinator-address"),
    "max_restarts": ("max_restarts", "--max-restarts"),
    "run_name": ("run_name", "--run-name"),
    "log_dir": ("log_dir", "--log-dir"),
    "python": ("python", "--python"),
    "overrides": ("overrides", "KEY=VALUE"),
}


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
            help="Training iterations PER RUN: every rank does this many updates. Not rescaled when "
            "ranks are added (more ranks = more samples per update, same number of updates). Default: 150.",
            envvar=env_var("max_iterations"),
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
        int | None,
        typer.Option(
            help="Number of nodes (machines). Default: 1.", envvar=env_var("nnodes"), rich_help_panel=PANEL_CLUSTER
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
) -> None:
    values = dict(ctx.params)
    try:
        cli_layer, env_layer = _layers(ctx, values)
        _apply_gpus(ctx, gpus, cli_layer, env_layer)
        from islab.spec import resolve_spec

        resolved = resolve_spec(cli_layer, env_layer, cluster)
    except SpecError as exc:
        _fail(exc)
    if json_output and not dry_run:
        _fail(SpecError(Issue("--json", "only works together with --dry-run", "Add --dry-run")))
    _plan_and_go(resolved, dry_run=dry_run, json_output=json_output)


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


def _plan_and_go(resolved: ResolvedSpec, *, dry_run: bool, json_output: bool) -> None:
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
    if node_rank == 0 and plan.node0_port is not None and not supervise.port_is_free(plan.node0_port):
        field = "coordinator_address" if plan.launcher == "skrl-jax" else "rendezvous.master_port"
        _fail(SpecError(Issue(
            field,
            f"port {plan.node0_port} is already in use on this node (node 0 must listen on it)",
            "Choose another port (--master-port / --coordinator-address), or stop the job using it",
        )))  # fmt: skip

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
    raise typer.Exit(supervise.run_plan(plan, node_rank))


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


def run(argv: list[str] | None = None) -> int:
    """Parse and execute; return the exit status (tests call this in-process)."""
    from typer._click import exceptions as click_exceptions  # typer vendors click

    args = list(sys.argv[1:] if argv is None else argv)
    dash = lookalike_dash_issue(args)
    if dash is not None:
        print(dash.message(), file=sys.stderr)
        return 2
    command = typer.main.get_command(app)
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
