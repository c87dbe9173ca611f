"""The option table: every option of ``islab-train`` declared once.

Each :class:`Option` row gives the flag as typed, what it does, its help panel and the spec field
it sets. From the table come the Typer parameters of the training command (and of ``doctor`` and
``sbatch``, which take the same spec options), the ``ISLAB_*`` variable of every option (``ISLAB_``
+ the flag in upper case, ``-`` -> ``_``), the command-line and environment layers handed to
:func:`islab.resolve.resolve.resolve_spec`, the options ``sbatch`` forwards to each node, and the
defaults the help states -- read from the spec's schema (:class:`~islab.spec.run_spec.RunSpec`)
and the planner's constants, never written into a help string.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape as escape_markup

from islab import rundir
from islab.libs.registry import LIBRARIES, frameworks_of
from islab.plan.plan import (
    HANG_TIMEOUT_RDZV_FACTOR,
    LOCALHOST,
    MIN_DEFAULT_HANG_TIMEOUT_S,
    default_hang_timeout,
)
from islab.plan.preflight import DEFAULT_PREFLIGHT_TIMEOUT_S, KILL_AFTER_S, MODES
from islab.spec.fields import (
    CHOICES,
    DEFAULT_C10D_ID,
    DEFAULT_MULTINODE_MASTER_PORT,
    JAX_INIT_TIMEOUT_S,
    TORCHRUN_C10D_JOIN_TIMEOUT_S,
    TORCHRUN_STATIC_RDZV_TIMEOUT_S,
)
from islab.spec.run_spec import field_default
from islab.spec.worker_args import spec_options

PROG = "islab-train"  # the command's name in help and messages
PANEL_TRAINING = "Training"
PANEL_PROCESSES = "Processes on this node"
PANEL_CLUSTER = "Cluster (several nodes)"
PANEL_OUTPUT = "Output and launching"


def _choice(name: str, values: tuple[str, ...]) -> type[Enum]:
    """A str Enum of the spec's choices, as click shows them: ``[rl_games|rsl_rl|skrl]``."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


LibChoice = _choice("LibChoice", CHOICES["lib"])
FrameworkChoice = _choice("FrameworkChoice", CHOICES["ml_framework"])
DeviceChoice = _choice("DeviceChoice", CHOICES["device"])
RdzvChoice = _choice("RdzvChoice", CHOICES["rendezvous.backend"])
LoggerChoice = _choice("LoggerChoice", CHOICES["logger"])
StartMethodChoice = _choice("StartMethodChoice", CHOICES["start_method"])
PreflightChoice = _choice("PreflightChoice", MODES)


@dataclass(frozen=True)
class Option:
    """One option. ``field``: the dotted spec field it sets (None: not a spec field). ``default``:
    how the help states the default, ``{}`` standing for the field's schema default."""

    flag: str
    help: str
    panel: str
    field: str | None = None
    kind: Any = str
    default: str = ""
    metavar: str | None = None
    param: str | None = None  # the Python name, when it is not the flag's
    train_only: bool = False  # --dry-run, --json, --all-ranks: the training command's own

    @property
    def name(self) -> str:
        return self.param or self.flag[2:].split("/")[0].replace("-", "_")

    @property
    def envvar(self) -> str:
        return "ISLAB_" + self.flag[2:].split("/")[0].replace("-", "_").upper()

    @property
    def is_flag(self) -> bool:
        return self.kind is bool

    def help_text(self) -> str:
        if not self.default:
            return self.help
        if self.field and "{}" in self.default:
            return f"{self.help} {self.default.format(field_default(self.field))}"
        return f"{self.help} {self.default}"

    def parameter(self) -> inspect.Parameter:
        """The Typer parameter of this row."""
        extra: dict[str, Any] = {}
        if self.metavar:
            extra["metavar"] = self.metavar
        if self.kind is Path:
            extra["dir_okay"] = False
        declared: tuple[str, ...] = ()
        if self.is_flag:
            declared = (self.flag,)
            if "/" in self.flag:
                extra["show_default"] = False
        # Help is rendered as Rich markup: escape it here, the one place help strings are built,
        # so text such as "[rank R]" is shown rather than eaten as a style tag.
        option = typer.Option(
            *declared, help=escape_markup(self.help_text()), envvar=self.envvar, rich_help_panel=self.panel, **extra
        )
        if self.is_flag and "/" not in self.flag:
            return keyword(self.name, Annotated[bool, option], False)
        return keyword(self.name, Annotated[self.kind | None, option], None)


def keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def own_option(
    panel: str, name: str, kind: Any, default: Any, help_text: str, *flags: str, metavar: str | None = None
) -> inspect.Parameter:
    """A subcommand's own option (``k8s --image``, ``sky --gpus-type``: not in the table), in its help panel."""
    extra = {"metavar": metavar} if metavar else {}
    option = typer.Option(*flags, help=help_text, rich_help_panel=panel, **extra)
    return keyword(name, Annotated[kind, option], default)


def worker_options() -> tuple[Option, ...]:
    """The rows of the worker options declared in :mod:`islab.spec.worker_args` with their own
    spec field (``cli``): the same flag as the worker's, the spec field of the row's name."""
    panels = {"training": PANEL_TRAINING, "output": PANEL_OUTPUT}
    rows = []
    for arg in spec_options():
        assert arg.cli is not None
        kind = _choice(f"{arg.name}_choice", arg.choices) if arg.choices is not None else arg.kind
        rows.append(Option(arg.flag, arg.cli.help, panels[arg.cli.panel], arg.name, kind, "Default: {}.", arg.metavar))
    return tuple(rows)


def _jax_libraries() -> str:
    return ", ".join(lib for lib in LIBRARIES if "jax" in frameworks_of(lib))


OPTIONS: tuple[Option, ...] = (
    # --- training ---------------------------------------------------------------------------
    Option("--lib", "RL library.", PANEL_TRAINING, "lib", LibChoice, "Default: {}."),
    Option("--ml-framework", f"Learner framework; jax only with --lib {_jax_libraries()}.", PANEL_TRAINING,
           "ml_framework", FrameworkChoice, "Default: {}."),
    Option("--task", "Task id.", PANEL_TRAINING, "task", str, "Default: {}."),
    Option("--task-module", "A module that registers tasks the way Isaac Lab's task packages do (gym.register), "
           "used without installing it: looked up from the working directory like python -m, imported by every "
           "rank.", PANEL_TRAINING, "task_module", metavar="MOD"),
    Option("--num-envs", "Parallel environments PER RANK (total = num_envs x world size).", PANEL_TRAINING,
           "num_envs", int, "Default: the task's, {}."),
    Option("--seed", "Base seed; each rank uses seed + its global rank.", PANEL_TRAINING, "seed", int,
           "Default: {}."),
    Option("--max-iterations", "Iterations PER RUN: every rank does this many training updates. Not rescaled "
           "when ranks are added (more ranks = more samples per update, same number of updates); see "
           "--total-env-steps for a fixed sample budget.", PANEL_TRAINING, "max_iterations", int, "Default: {}."),
    Option("--total-env-steps", "Instead of --max-iterations: train until the env steps SUMMED OVER ALL RANKS "
           "reach N, i.e. ceil(N / (world size x num_envs x rollout length)) iterations, computed by the run from "
           "the world size it gets, so adding ranks keeps the sample budget. Not with --max-iterations.",
           PANEL_TRAINING, "total_env_steps", int, metavar="N"),
    Option("--script", "Run your own training script on every rank instead of islab's worker: python PATH "
           "ARGS, ARGS being everything after --. Rank logs, supervision, dry run, SLURM work as for the worker; "
           "the run directory is in ISLAB_RUN_DIR.", PANEL_TRAINING, "entrypoint", metavar="PATH"),
    Option("--module", "Like --script for a module: python -m NAME ARGS.", PANEL_TRAINING, "entrypoint",
           metavar="NAME"),
    Option("--command", "Like --script for an executable or console script (torchrun --no-python NAME ARGS).",
           PANEL_TRAINING, "entrypoint", metavar="NAME"),
    Option("--isaaclab", "Preset: run Isaac Lab's own trainer on every rank. auto: the Isaac Lab 3 installed in "
           "--python, each rank running what 'isaaclab train_multigpu' runs (KEY=VALUE: its Hydra overrides); DIR: a "
           "checkout (3.x the same; 2.x its scripts/reinforcement_learning/<lib>/train.py --headless --distributed). "
           "--task/--num-envs/--seed/--max-iterations become its flags; more flags after --.", PANEL_TRAINING,
           "isaaclab", metavar="auto|DIR"),
    Option("--mjlab", "Preset: run mjlab's own train command (one process; it spawns a rank per GPU of --gpus "
           "itself), with --task/--num-envs/--seed/--max-iterations mapped; one node only.", PANEL_TRAINING, "mjlab",
           kind=bool),
    # --- processes ------------------------------------------------------------------------------
    Option("--gpus", "GPU processes per node: sets --device cuda and N ranks per node ('all' = every visible "
           "GPU, honouring CUDA_VISIBLE_DEVICES).", PANEL_PROCESSES, metavar="N|all"),
    Option("--device", "cuda (NCCL) or cpu (gloo).", PANEL_PROCESSES, "device", DeviceChoice, "Default: {}."),
    Option("--nproc", "Processes per node, e.g. --device cpu --nproc 2.", PANEL_PROCESSES, "nproc_per_node", int,
           "Default: {}."),
    Option("--virtual-local-rank", "torchrun's --virtual-local-rank: every rank sees LOCAL_RANK=0 and only its own "
           "GPU (as cuda:0), for software that picks its device wrongly when it sees them all (Isaac Lab's "
           "--virtual_local_rank); use the global rank to name per-rank files.", PANEL_PROCESSES,
           "virtual_local_rank", kind=bool),
    Option("--monitor-interval", "torchrun's --monitor-interval: seconds between its agent's checks of the ranks.",
           PANEL_PROCESSES, "monitor_interval_s", float, "Default: torchrun's.", metavar="SECONDS"),
    Option("--start-method", "torchrun's --start-method: how its agent starts the ranks.", PANEL_PROCESSES,
           "start_method", StartMethodChoice, "Default: torchrun's spawn (islab's worker on CPU ranks: forked from "
           "the agent)."),
    # --- cluster -----------------------------------------------------------------------------
    Option("--cluster", "YAML cluster spec shared by all nodes (see configs/cluster/); options override it.",
           PANEL_CLUSTER, kind=Path),
    Option("--nnodes", "Number of nodes (machines), or MIN:MAX for elastic membership (c10d rendezvous only: "
           "training starts once MIN nodes have joined, up to MAX).", PANEL_CLUSTER, "nnodes", str, "Default: {}.",
           metavar="N|MIN:MAX"),
    Option("--node-rank", "This node's index in [0, nnodes). Required to launch a multi-node run; without it "
           "--dry-run prints every node's command.", PANEL_CLUSTER, "node_rank", int),
    Option("--master-addr", "Static rendezvous: node 0's address.", PANEL_CLUSTER, "rendezvous.master_addr", str,
           f"Default: {LOCALHOST} on one node."),
    Option("--master-port", "Static rendezvous: node 0's port.", PANEL_CLUSTER, "rendezvous.master_port", int,
           f"Default: a free port on one node, {DEFAULT_MULTINODE_MASTER_PORT} on several."),
    Option("--rdzv-backend", "torchrun rendezvous.", PANEL_CLUSTER, "rendezvous.backend", RdzvChoice,
           "Default: {}."),
    Option("--rdzv-endpoint", "c10d rendezvous: host:port every node can reach.", PANEL_CLUSTER,
           "rendezvous.endpoint"),
    Option("--rdzv-id", "c10d rendezvous: job id shared by all nodes.", PANEL_CLUSTER, "rendezvous.id", str,
           f"Default: {DEFAULT_C10D_ID}."),
    Option("--rdzv-timeout", "How long node 0 waits for every node to join before failing with a clear message "
           "(torchrun static and c10d, and skrl-JAX).", PANEL_CLUSTER, "rendezvous.timeout_s", int,
           f"Default: the launcher's own (torchrun static {TORCHRUN_STATIC_RDZV_TIMEOUT_S}, c10d "
           f"{TORCHRUN_C10D_JOIN_TIMEOUT_S}; skrl-JAX {JAX_INIT_TIMEOUT_S}).", metavar="SECONDS"),
    Option("--rdzv-last-call", "c10d with --nnodes MIN:MAX: once MIN nodes have joined (at the start, or after "
           "a node was lost), how long to wait for more before training starts.", PANEL_CLUSTER,
           "rendezvous.last_call_s", int, "Default: torchrun's 30.", metavar="SECONDS"),
    Option("--coordinator-address", "skrl-JAX only: node 0's host:port.", PANEL_CLUSTER, "coordinator_address",
           str, f"Default: {LOCALHOST}:<free port> on one node."),
    Option("--max-restarts", "torchrun only: restarts of the whole node group after a failure.", PANEL_CLUSTER,
           "max_restarts", int, "Default: {}."),
    Option("--slurm/--no-slurm", "Take nnodes, the node rank and node 0's address:port from the SLURM allocation "
           "(SLURM_NNODES, SLURM_NODEID, first host of SLURM_JOB_NODELIST, 20000 + SLURM_JOB_ID % 20000). "
           "On by itself under srun; options on the command line still win.", PANEL_CLUSTER, kind=bool,
           default="[default: auto]"),
    Option("--k8s/--no-k8s", "Take nnodes, the node rank and node 0's address:port from the Kubernetes job this pod "
           "belongs to (PET_* of Kubeflow TrainJob/PyTorchJob; JOB_COMPLETION_INDEX and pod 0's DNS name for JobSet "
           "and an Indexed Job: docs/KUBERNETES.md). On by itself in the pods 'islab-train k8s' writes; options on the "
           "command line still win.", PANEL_CLUSTER, kind=bool, default="[default: auto]"),
    Option("--sky/--no-sky", "Take nnodes, the node rank and node 0's address:port from the SkyPilot task this node "
           "runs (SKYPILOT_NUM_NODES, SKYPILOT_NODE_RANK, first line of SKYPILOT_NODE_IPS; docs/CLOUD.md). On by "
           "itself in a SkyPilot task's run; options on the command line still win.", PANEL_CLUSTER, kind=bool,
           default="[default: auto]"),
    # --- output ------------------------------------------------------------------------------
    Option("--run-name", "Suffix of the run directory; letters, digits, . _ - only.", PANEL_OUTPUT, "run_name"),
    Option("--log-dir", "Root of run directories: <log_dir>/<lib>/<task>/<time>[_<run_name>] (an entry point: "
           "script|module|command/<name>/...; presets: isaaclab-<lib>/<task>/..., mjlab/<task>/...).", PANEL_OUTPUT,
           "log_dir", str, "Default: {}."),
    Option("--resume", "Continue a run: its run directory (training goes on there) or a checkpoint file (a new "
           "run directory). Alone it finishes the run's original target (as a SLURM requeue does); "
           "--max-iterations M (or --total-env-steps N) given with it trains M more iterations (N more env "
           "steps). Only node 0 reads it.", PANEL_OUTPUT, "resume", metavar="PATH"),
    Option("--checkpoint-interval", "Iterations between checkpoints (atomic; the last iteration is always saved; "
           "0: only at the end). An elastic restart (--max-restarts) resumes from the latest.", PANEL_OUTPUT,
           "checkpoint_interval", int, "Default: {}.", metavar="N"),
    Option("--hang-timeout", "Stop the job (exit 1) when no rank finishes a training iteration for this long "
           "(counted from the first finished iteration): every rank first dumps its thread stacks into its log, and "
           "the error names the ranks that are behind and where they are stuck. Isaac Lab's and mjlab's trainers "
           "are watched through their TensorBoard events (keep it above their flush interval, 120 s for rl_games "
           "and skrl); a --script / --module / --command only when given. 0 disables.", PANEL_OUTPUT,
           "hang_timeout_s", int,
           f"Default: {HANG_TIMEOUT_RDZV_FACTOR} x --rdzv-timeout, at least {MIN_DEFAULT_HANG_TIMEOUT_S} "
           f"({default_hang_timeout(TORCHRUN_STATIC_RDZV_TIMEOUT_S)} for a static rendezvous).", metavar="SECONDS"),
    Option("--logger", "Where rank 0 logs each iteration (env steps, mean return, steps/s, losses). The "
           "libraries always write TensorBoard event files into the run directory; wandb (the [wandb] extra) also "
           "logs to one Weights & Biases run per run directory, step = env steps of the whole job, continued by "
           "--resume RUN_DIR (WANDB_MODE=offline: files only, under <run_dir>/wandb).", PANEL_OUTPUT, "logger",
           LoggerChoice, "Default: {}."),
    *worker_options(),
    Option("--preflight", "Before a launch of more than one rank, run the job's own plan for a few seconds with a "
           "probe on every rank (same launcher, rendezvous, env, devices): join the process group, compare the "
           "ranks' GPUs and the fields every node must agree on, time all-reduces; a problem stops the launch "
           "(exit 1) with the ranks named and the fix (docs/NCCL.md). only: the check alone, then exit.",
           PANEL_OUTPUT, kind=PreflightChoice, default="Default: on."),
    Option("--preflight-timeout", "How long the pre-flight may take; every probe process is killed "
           f"{KILL_AFTER_S} s later and the ranks or nodes that never answered are named.", PANEL_OUTPUT,
           kind=int, default=f"Default: {DEFAULT_PREFLIGHT_TIMEOUT_S}.", metavar="SECONDS"),
    Option("--nccl-safe", "Conservative NCCL transports for every rank (NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 "
           "NCCL_ALGO=Ring NCCL_P2P_DISABLE=1: the settings users are told to try first; slower, see docs/NCCL.md). "
           "Values set in the cluster file's env or the shell win.", PANEL_OUTPUT, kind=bool),
    Option("--python", "Interpreter for the launcher and the ranks, e.g. ${ISAACSIM_PYTHON_EXE}.", PANEL_OUTPUT,
           "python", str, "[default: this interpreter]"),
    Option("--dry-run", "Print the commands (with where each value came from) and exit.", PANEL_OUTPUT, kind=bool,
           train_only=True),
    Option("--json", "With --dry-run: print the plan as JSON.", PANEL_OUTPUT, kind=bool, param="json_output",
           train_only=True),
    Option("--all-ranks", "Show every rank's output on the console, prefixed [rank R]. By default only rank 0's "
           "warnings/errors and the progress display are shown; every rank's full output is always in "
           f"{rundir.rank_log('<run_dir>', '<R>')}.", PANEL_OUTPUT, kind=bool, train_only=True),
)  # fmt: skip
BY_NAME = {option.name: option for option in OPTIONS}
BY_FIELD = {option.field: option for option in OPTIONS if option.field not in (None, "entrypoint")}

# Spec fields without an option of their own: the cluster file's env, the trailing KEY=VALUE
# overrides and the entry point's arguments after `--` (their writers place them).
NOT_OPTIONS = ("env", "overrides", "args")


def option_words(option: Option, value: Any) -> list[str]:
    """One option with its value as command-line words: a flag as its spelling for the value
    (``--nccl-safe`` when true, nothing when false; ``--k8s`` / ``--no-k8s``), else the flag and
    the value's text (an Enum's value)."""
    if option.is_flag:
        on, _, off = option.flag.partition("/")
        return [on] if value else ([off] if off else [])
    return [option.flag, str(value.value if isinstance(value, Enum) else value)]


def field_argv(fields: Mapping[str, Any]) -> list[str]:
    """Spec fields as ``islab-train`` options, in the order given: the one writer of the command
    lines that ``sbatch``'s nodes, ``k8s``'s pods, a sweep's trials and a run trained again get.
    ``fields`` is keyed by dotted field (``rendezvous.master_port``); the entry point as
    ``{"entrypoint": {kind: target}}`` or ``"entrypoint.<kind>"``. The fields in
    :data:`NOT_OPTIONS` are skipped (the caller places them); a field no option sets raises KeyError."""
    args: list[str] = []
    for field, value in fields.items():
        if field in NOT_OPTIONS:
            continue
        if field == "entrypoint":
            ((kind, target),) = value.items()
            args += [f"--{kind}", str(target)]
        elif field.startswith("entrypoint."):
            args += [f"--{field.split('.', 1)[1]}", str(value)]
        else:
            args += option_words(BY_FIELD[field], value)
    return args


# The trailing KEY=VALUE items: agent-config overrides (the spec field ``overrides``).
OVERRIDES = inspect.Parameter(
    "overrides",
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    annotation=Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KEY=VALUE]...",
            help="Agent-config overrides, e.g. algorithm.learning_rate=3e-4 (dotted keys into "
            "the task's agent config for --lib: <task>/agents/<lib>_ppo_cfg.yaml, see islab-train tasks).",
            show_default=False,
        ),
    ],
    default=None,
)
CONTEXT = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)


def signature(*, train: bool, exclude: tuple[str, ...] = (), own: tuple[inspect.Parameter, ...] = ()) -> Any:
    """A ``(ctx, [overrides], **options)`` signature for a command: the table's options (the
    training command's own too when ``train``), minus ``exclude``, plus ``own``."""
    rows = [option.parameter() for option in OPTIONS if (train or not option.train_only) and option.name not in exclude]
    return inspect.Signature([CONTEXT, OVERRIDES, *rows, *own])
