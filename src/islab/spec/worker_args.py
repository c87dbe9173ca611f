"""What a rank is told: every argument of ``python -m islab.worker``, declared once.

The launcher and the ranks are two programs. The launcher plans a run from a
:class:`~islab.spec.run_spec.RunSpec` and writes one command line for every rank; each rank parses
that command line and trains. Both sides read the table below, so they cannot drift apart:

* the planner calls :func:`to_argv` (with :func:`values_from` reading the spec fields),
* the worker calls :func:`build_parser` / :func:`parse`,
* the spec's schema and everything else that needs a default (``RunSpec``, the checkpointer,
  ``islab play``'s seed fallback, the CLI's help) read it with :func:`default_of`.

One :class:`WorkerArg` row is one argument: its flag, type, default, help, the spec field the
planner takes it from, and when the planner writes it (always, only when given, only when it
differs from the default). Adding a worker option is one row here plus the code on the rank that
uses it; a row with ``cli`` set also becomes a spec field, an ``islab-train`` option and its
``ISLAB_*`` variable (:mod:`islab.cli.options`), so a user can set it from the command line, the
environment or a cluster file.

Torch-free and with absolute imports only: the launcher imports it, and skrl's JAX launcher runs
the worker by path.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from islab import rundir
from islab.libs.registry import LIBRARIES, ML_FRAMEWORKS
from islab.spec.dotted import field_value


class Emit(Enum):
    """When the planner writes an argument into a rank's command line."""

    ALWAYS = "always"
    GIVEN = "given"  # only when its value is not None
    NOT_DEFAULT = "not default"  # only when its value differs from the default (the argv stays short)


@dataclass(frozen=True)
class Cli:
    """How a row without a hand-written spec field is offered to users: a ``RunSpec`` field of the
    row's name (same default, ``minimum`` and ``choices``) and an ``islab-train`` option of the same
    flag (its ``ISLAB_*`` variable, ``sbatch`` forwarding and help come with it).
    ``panel``: ``"training"`` or ``"output"``, the help section it is listed in. ``shared``: every
    node must be given the same value (:mod:`islab.spec.launch_rules`); False when only node 0's
    value matters."""

    help: str
    panel: str = "output"
    shared: bool = True


@dataclass(frozen=True)
class WorkerArg:
    """One argument of the worker's command line.

    ``default`` is *the* default of this setting, for the worker and for the spec field of the
    same name; a ``required`` argument is always written by the planner, so the worker refuses to
    start without it (``default`` then is only the spec's). ``field`` is the dotted spec field the
    planner reads (None: the planner supplies the value itself, e.g. the run directory).
    ``yields_to``: another argument that replaces this one when given (argparse: one exclusive
    group). A flag without ``--`` is the positional ``key=value`` list."""

    flag: str
    help: str
    kind: type = str  # str | int | float | Path | bool (a switch)
    default: Any = None
    field: str | None = None
    emit: Emit = Emit.ALWAYS
    required: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    minimum: int | None = None  # the worker refuses smaller values
    yields_to: str | None = None
    cli: Cli | None = None

    @property
    def name(self) -> str:
        """The attribute on the parsed namespace (``--num-envs`` -> ``num_envs``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def positional(self) -> bool:
        return not self.flag.startswith("--")


# The worker's CPU threads per rank, when set (islab.worker.context.cpu_threads_per_rank): sweeps, eval
# and scale set it for the processes they start.
THREADS_VARIABLE = "ISLAB_THREADS_PER_RANK"
_LATEST = rundir.LATEST_CHECKPOINT  # checkpoint names in help texts come from the run directory's layout
_HISTORY = f"{rundir.HISTORY_PREFIX}<N>.pt"

WORKER_ARGS: tuple[WorkerArg, ...] = (
    WorkerArg("--lib", "RL library", default="rsl_rl", field="lib", required=True, choices=tuple(LIBRARIES)),
    WorkerArg("--ml-framework", "learner framework", default="torch", field="ml_framework", choices=ML_FRAMEWORKS),
    WorkerArg("--task", "a registered task id (see islab-train tasks)", default="Islab-Cartpole-v0", field="task",
              required=True),
    WorkerArg("--task-module", "import MOD from the working directory first: a module that registers tasks "
              "without being installed", field="task_module", emit=Emit.GIVEN, metavar="MOD"),
    # No default here: the spec's is the task's own, which resolution reads (islab.resolve.steps.derive).
    WorkerArg("--num-envs", "environments on this rank", int, field="num_envs", required=True),
    WorkerArg("--seed", "base seed; each rank adds its global rank", int, default=42, field="seed"),
    # The worker turns a budget into iterations once it knows the world size it got.
    WorkerArg("--total-env-steps", "train until the env steps summed over all ranks reach N (the iterations "
              "follow from the world size)", int, field="total_env_steps", emit=Emit.GIVEN, required=True,
              metavar="N", minimum=1),
    WorkerArg("--max-iterations", "training iterations per run (every rank)", int, default=150,
              field="max_iterations", required=True, minimum=1, yields_to="total_env_steps"),
    WorkerArg("--device", "where this rank trains", default="cuda", field="device", choices=("cuda", "cpu")),
    WorkerArg("--run-dir", "the run directory (chosen by the launcher, the same on every rank)", Path,
              required=True),
    WorkerArg("--distributed", "train across all ranks of the job", bool, default=False),
    WorkerArg("--checkpoint-interval", "write an islab checkpoint every N iterations (0: only after the last)",
              int, default=10, field="checkpoint_interval", metavar="N", minimum=0),
    WorkerArg("--keep-checkpoints", f"{_HISTORY} checkpoints kept beside {_LATEST}: the newest N (0: only "
              f"{_LATEST})", int, default=3, field="keep_checkpoints", emit=Emit.NOT_DEFAULT, metavar="N", minimum=0,
              # only rank 0 writes checkpoints: a per-node field
              cli=Cli(f"Iteration checkpoints ({rundir.CHECKPOINTS_DIR}/{_HISTORY}) kept beside {_LATEST}: the "
                      f"newest N, older ones are deleted as new ones are written; 0: only {_LATEST}.", shared=False)),
    WorkerArg("--logger", "wandb: rank 0 also logs every iteration to one Weights & Biases run per run directory",
              default="tensorboard", field="logger", emit=Emit.NOT_DEFAULT, choices=("tensorboard", "wandb")),
    # Only rank 0 renders and records (islab.video.training): a per-node field.
    WorkerArg("--video-interval", "rank 0 records one env's episode at the start and every N iterations: MP4 in "
              "videos/train/, TensorBoard, W&B with --logger wandb (0: never)", int, default=0,
              field="video_interval", emit=Emit.NOT_DEFAULT, metavar="N", minimum=0,
              cli=Cli("Record one env's episode on rank 0 at the start and every N iterations (e.g. 50): an MP4 "
                      "and its returns in RUN/videos/train/, a clip in TensorBoard (and W&B with --logger wandb); "
                      "other ranks create no renderer. 0: off. Needs the [video] extra.", shared=False)),
    # A collective waits as long as the rendezvous does: a vanished node fails the job, not hangs it.
    # The planner supplies that wait (plan.rendezvous_timeout_of: the user's rendezvous.timeout_s, else
    # the launcher's own default), not a spec field. The default is for a rank started by hand.
    WorkerArg("--peer-timeout", "how long a collective waits for the other ranks before this rank fails (a node "
              "that vanished without closing its sockets would otherwise hang the job)", float, default=600.0,
              metavar="SECONDS"),
    WorkerArg("--resume", f"continue a run: its directory ({rundir.CHECKPOINTS_DIR}/{_LATEST}) or a checkpoint file. "
              "Alone it trains to the run's original target; with --max-iterations M, M more iterations "
              "(--total-env-steps N: N more env steps). Only rank 0 reads it.", Path, field="resume",
              emit=Emit.GIVEN, metavar="PATH"),
    # Which scheduler job this is, and why this start continues it: decided once by the launcher from the
    # allocation that placed its node (islab.resolve.job), so a rank never reads SLURM_* or a pod's variables.
    WorkerArg("--scheduler-job", "the scheduler job this run belongs to (slurm-<id>, k8s-<name>): a restart of "
              "the job continues only a checkpoint the job wrote", emit=Emit.GIVEN, metavar="JOB"),
    WorkerArg("--job-restart", "why this start continues the scheduler job's own checkpoint (a SLURM requeue, "
              "a Kubernetes pod started again)", emit=Emit.GIVEN, metavar="REASON"),
    WorkerArg("overrides", "agent-config overrides", default=(), field="overrides", metavar="key=value"),
)  # fmt: skip
BY_NAME: Mapping[str, WorkerArg] = {arg.name: arg for arg in WORKER_ARGS}


def default_of(name: str) -> Any:
    """The one default of a worker argument (``"seed"`` -> 42)."""
    return BY_NAME[name].default


def choices_of(name: str) -> tuple[str, ...]:
    """The values a worker argument accepts (``"device"`` -> ``("cuda", "cpu")``)."""
    choices = BY_NAME[name].choices
    assert choices is not None, f"--{name} takes any value"
    return choices


def spec_options() -> tuple[WorkerArg, ...]:
    """The rows that bring their own spec field and ``islab-train`` option (``cli`` set)."""
    rows = tuple(arg for arg in WORKER_ARGS if arg.cli is not None)
    assert all(arg.field == arg.name for arg in rows), "a row's own spec field is named like its flag"
    return rows


# ----------------------------------------------------------------------------------------------
# The planner's side: values -> argv
# ----------------------------------------------------------------------------------------------


def values_from(fields: Mapping[str, Any], **supplied: Any) -> dict[str, Any]:
    """Each argument's value: read from ``fields`` (a spec as a plain dict, ``rendezvous`` nested)
    at its ``field``, or taken from ``supplied`` (the planner's own: ``run_dir``, ``distributed``)."""
    values = {}
    for arg in WORKER_ARGS:
        if arg.field is None:
            values[arg.name] = supplied[arg.name]
            continue
        values[arg.name] = field_value(fields, arg.field)
    return values


def to_argv(values: Mapping[str, Any]) -> list[str]:
    """The worker's command line (what follows ``-m islab.worker`` / the script's path), in the
    table's order; ``values`` maps every argument's name to its value (:func:`values_from`)."""
    argv: list[str] = []
    for arg in WORKER_ARGS:
        value = values[arg.name]
        if arg.positional:
            argv += [str(item) for item in value]
        elif arg.yields_to is not None and values[arg.yields_to] is not None:
            continue
        elif arg.kind is bool:
            argv += [arg.flag] if value else []
        elif value is not None and (arg.emit in (Emit.ALWAYS, Emit.GIVEN) or value != arg.default):
            argv += [arg.flag, str(value)]
    return argv


# ----------------------------------------------------------------------------------------------
# The worker's side: argv -> values
# ----------------------------------------------------------------------------------------------


def _exclusive_groups() -> dict[str, tuple[WorkerArg, ...]]:
    """Arguments tied by ``yields_to``, keyed by the name of the one that wins."""
    return {arg.yields_to: (BY_NAME[arg.yields_to], arg) for arg in WORKER_ARGS if arg.yields_to is not None}


def build_parser(prog: str = "python -m islab.worker", description: str | None = None) -> argparse.ArgumentParser:
    """The worker's parser, one ``add_argument`` per row (in a row's exclusive group when tied)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    groups = _exclusive_groups()
    grouped = {member.name: winner for winner, members in groups.items() for member in members}
    made: dict[str, Any] = {}
    for arg in WORKER_ARGS:
        target: Any = parser
        if arg.name in grouped:
            winner = grouped[arg.name]
            if winner not in made:
                # not required by argparse: --resume alone trains to the run's original target (parse checks)
                made[winner] = parser.add_mutually_exclusive_group()
            target = made[winner]
        if arg.positional:
            target.add_argument(arg.flag, nargs="*", metavar=arg.metavar, help=arg.help)
        elif arg.kind is bool:
            target.add_argument(arg.flag, action="store_true", help=arg.help)
        else:
            options: dict[str, Any] = {"type": arg.kind, "help": arg.help}
            if arg.choices is not None:
                options["choices"] = arg.choices
            if arg.metavar is not None:
                options["metavar"] = arg.metavar
            if arg.name in grouped:
                options["default"] = None  # one of them is given, or --resume alone (checked in parse)
            elif arg.required:
                options["required"] = True
            else:
                options["default"] = arg.default
            target.add_argument(arg.flag, **options)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` with ``parser`` (from :func:`build_parser`) and check each row's minimum."""
    args = parser.parse_args(None if argv is None else list(argv))
    for members in _exclusive_groups().values():
        unset = any(m.required for m in members) and all(getattr(args, m.name) is None for m in members)
        if unset and getattr(args, "resume", None) is None:  # --resume alone: the run's original target
            flags = " or ".join(m.flag for m in members)
            parser.error(f"one of {flags} is required (--resume alone: the run's original target)")
    for arg in WORKER_ARGS:
        value = getattr(args, arg.name)
        if arg.minimum is not None and value is not None and value < arg.minimum:
            parser.error(f"{arg.flag} must be >= {arg.minimum}")
    return args
