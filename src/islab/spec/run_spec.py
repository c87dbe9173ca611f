"""The run spec: one validated, immutable description of a training launch (the schema only).

:class:`RunSpec` holds every setting of a launch and the rules between them (``jax`` only with
skrl, a multi-node static rendezvous needs node 0's address, ...). A failed rule is a
:class:`~islab.spec.issues.SpecError` with one-line, human messages of the form
``error: <field>: <what is wrong>. <how to fix it>.`` -- never a pydantic dump or a traceback.
Its building blocks (value types, defaults, the ``Rendezvous`` sub-model, the worker options' fields)
are in :mod:`islab.spec.fields`.

This module reads no files and knows nothing of where values came from: merging the command
line, SLURM, ``ISLAB_*`` variables, a cluster file and the defaults, and the rules that need
the disk (the agent config's keys, the ``--resume`` path), live in :mod:`islab.resolve.resolve`.

Nor does it read the task registry, which may start a child process (:mod:`islab.tasks.metadata`):
resolution hands in what the edge read (:mod:`islab.resolve.edge`) -- the installed tasks' ids
(validation context :data:`TASK_IDS`), a task's default ``num_envs`` and the agent config's rollout
length for the planner's budget (:meth:`RunSpec.with_rollout_length`).

Settings that are only known on the machine that launches (a free port, the GPU count, the clock)
are *not* filled in here: the spec keeps ``None`` for "not given", so the rules "JAX-only option on
a torch launcher" or "multi-node without a master address" can tell an explicit value from a
default. :mod:`islab.plan.plan` fills those in.

Torch-free, like the whole launcher (``--help``, ``--dry-run`` and spec errors must be instant).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import Field, PrivateAttr, StrictStr, ValidationInfo, field_serializer, field_validator, model_validator

from islab.libs.registry import LIBRARIES, frameworks_of, launcher_of
from islab.spec import input_rules
from islab.spec.fields import (
    DEFAULT_TASK,
    FALLBACK_NUM_ENVS,
    WORKER_OPTION_FIELDS,
    Count,
    Device,
    Lib,
    Logger,
    MLFramework,
    NonNegative,
    Rendezvous,
    Seconds,
    StartMethod,
    WorkerOptionFields,
    host_port_field,
    node_range_keys,
)
from islab.spec.issues import mask_env, rule
from islab.spec.launch_rules import check_jax, check_torchrun
from islab.spec.worker_args import default_of

# Validation context key: the installed tasks' ids, ``task`` must be one (a spec built in code has none).
TASK_IDS = "task_ids"


class RunSpec(WorkerOptionFields):  # type: ignore[misc, valid-type]
    """Everything needed to plan a launch. Immutable; built only through validation."""

    # The defaults of the settings a rank is told are the worker arguments' (islab.spec.worker_args).
    lib: Lib = default_of("lib")
    ml_framework: MLFramework = default_of("ml_framework")
    task: StrictStr = DEFAULT_TASK
    # A module that registers tasks without being installed (read statically here, imported by ranks).
    task_module: StrictStr | None = None
    # The task's own default when not given, which resolution reads from its registration
    # (islab.resolve.steps.derive); FALLBACK_NUM_ENVS where no task's reached it.
    num_envs: Count = FALLBACK_NUM_ENVS
    seed: NonNegative = default_of("seed")
    # Per run: every rank does this many updates. Ignored when ``total_env_steps`` is given (the
    # worker derives the iterations from it); giving both is an error.
    max_iterations: Count = default_of("max_iterations")
    # A budget for the whole job: env steps summed over all ranks (see islab.spec.budget).
    total_env_steps: Count | None = None
    # The number of nodes; with ``nnodes: "MIN:MAX"`` (c10d only) this is MAX and ``min_nnodes`` is
    # MIN. ``min_nnodes`` is not an input key: it only comes from the range, and the spec prints
    # and serializes ``nnodes`` back as ``"MIN:MAX"``.
    nnodes: Count = 1
    min_nnodes: Count | None = Field(default=None, exclude=True)
    nproc_per_node: Count = 1
    node_rank: NonNegative | None = None
    device: Device = default_of("device")
    rendezvous: Rendezvous = Field(default_factory=Rendezvous)
    max_restarts: NonNegative = 0
    # torchrun's options for its agent, passed on when given (as Isaac Lab's train_multigpu does):
    # every rank sees LOCAL_RANK 0 and only its own GPU; how often the agent checks its ranks; how
    # it starts them. Per node, shown by the dry run only when set (AGENT_OPTION_FIELDS).
    virtual_local_rank: bool = False
    monitor_interval_s: Seconds | None = None
    start_method: StartMethod | None = None
    coordinator_address: StrictStr | None = None
    env: Mapping[str, str] = Field(default_factory=dict, validate_default=True)
    run_name: StrictStr | None = None
    log_dir: StrictStr = "logs"
    python: StrictStr = sys.executable
    overrides: tuple[StrictStr, ...] = default_of("overrides")
    # Continue a run: its directory (training goes on in it) or a checkpoint file (a new run dir).
    resume: StrictStr | None = None
    checkpoint_interval: NonNegative = default_of("checkpoint_interval")
    # Seconds without a finished iteration on any rank before the job counts as hung (our worker
    # only); None: the planner's default, scaled with the rendezvous timeout; 0: never.
    hang_timeout_s: NonNegative | None = None
    # Where rank 0 also logs each iteration: the libraries always write TensorBoard events; "wandb"
    # adds one Weights & Biases run per run directory (the [wandb] extra), continued by --resume.
    logger: Logger = default_of("logger")
    # Bring your own: what each rank runs instead of our worker ({script|module|command: NAME}, see
    # ENTRY_KINDS) and its arguments, passed verbatim (everything after ``--`` on the command line).
    entrypoint: Mapping[str, str] | None = None
    args: tuple[StrictStr, ...] = ()
    # The Isaac Lab preset: "auto" (the isaaclab installed in ``python``) or a checkout; resolve turns
    # it into ``entrypoint`` and ``args`` (Isaac Lab 3's per-rank trainer, or 2.x's <lib>/train.py).
    isaaclab: StrictStr | None = None
    # The mjlab preset: mjlab's own `train` console script (resolve turns it into the entry point).
    mjlab: bool = False
    _rollout_length: int | None = PrivateAttr(default=None)  # not an input key (with_rollout_length)

    # -- single fields --------------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _node_range(cls, data: Any) -> Any:
        return node_range_keys(data) if isinstance(data, Mapping) else data

    @model_validator(mode="before")
    @classmethod
    def _budget_or_iterations(cls, data: Any) -> Any:
        """``total_env_steps`` decides the iterations, so an explicit ``max_iterations`` (a key that
        is present at all: defaults are not) contradicts it."""
        if isinstance(data, Mapping) and data.get("total_env_steps") is not None and "max_iterations" in data:
            raise rule(
                "total_env_steps",
                "is a sample budget for the whole job and decides the number of iterations, so it cannot be "
                "combined with max_iterations",
                "Remove one: keep total_env_steps to train that many env steps summed over all ranks, or "
                "max_iterations to train that many iterations on every rank",
                given_by="max_iterations",
            )
        return data

    @field_serializer("nnodes")
    def _nnodes_as_given(self, value: int) -> int | str:
        return value if self.min_nnodes is None else f"{self.min_nnodes}:{value}"

    @property
    def elastic(self) -> bool:
        """Elastic membership: between ``min_nnodes`` and ``nnodes`` nodes may take part."""
        return self.min_nnodes is not None

    @property
    def launcher(self) -> str | None:
        """What starts the ranks ("torchrun" | "skrl-jax"): the library registry's one decision for
        (lib, ml_framework), read by everything after resolution (None only for a pair validation refuses)."""
        return launcher_of(self.lib, self.ml_framework)

    @property
    def rollout_length(self) -> int | None:
        """Env steps per env per iteration in the agent config of (lib, task, overrides), for the
        planner's budget; None unless resolution read it (not for a user's entry point)."""
        return self._rollout_length

    def with_rollout_length(self, steps: int) -> RunSpec:
        """A copy of this spec that knows its agent config's rollout length (no dump carries it)."""
        known = self.model_copy()
        known._rollout_length = steps
        return known

    @property
    def nnodes_text(self) -> str:
        """``nnodes`` as torchrun's ``--nnodes`` takes it: ``"2"`` or ``"1:2"``."""
        return str(self.nnodes) if self.min_nnodes is None else f"{self.min_nnodes}:{self.nnodes}"

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str, info: ValidationInfo) -> str:
        return input_rules.known_task(value, (info.context or {}).get(TASK_IDS))

    @field_validator("task_module")
    @classmethod
    def _task_module(cls, value: str | None) -> str | None:
        return input_rules.module_name("task_module", value)

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, value: str | None) -> str | None:
        return input_rules.run_name(value)

    @field_validator("log_dir", "python", "resume", "isaaclab")
    @classmethod
    def _printable_path(cls, value: str | None, info: Any) -> str | None:
        optional = info.field_name in ("resume", "isaaclab")
        return input_rules.printable_path(info.field_name, value, optional=optional)

    @field_validator("coordinator_address")
    @classmethod
    def _coordinator(cls, value: str | None) -> str | None:
        return host_port_field("coordinator_address", value, "Write node 0's address as host:port, e.g. 10.0.0.1:5000")

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_as_text(cls, value: Any) -> Any:
        return input_rules.env_values_as_text(value)

    @field_validator("env", mode="after")
    @classmethod
    def _env_names(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        return MappingProxyType(input_rules.env_names(value))

    @field_validator("overrides", mode="after")
    @classmethod
    def _overrides(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return input_rules.overrides(value)

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, value: Mapping[str, str] | None) -> Mapping[str, str] | None:
        return input_rules.entrypoint(value)

    @field_validator("args")
    @classmethod
    def _args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return input_rules.entry_args(value)

    @field_serializer("entrypoint")
    def _entry_as_dict(self, value: Mapping[str, str] | None) -> dict[str, str] | None:
        return dict(value) if value is not None else None

    @field_serializer("env")
    def _env_as_dict(self, value: Mapping[str, str]) -> dict[str, str]:
        return dict(value)

    # -- rules across fields ----------------------------------------------------------------------

    @model_validator(mode="after")
    def _cross_field_rules(self) -> RunSpec:
        rdzv = self.rendezvous
        if self.node_rank is not None and self.node_rank >= self.nnodes:
            raise rule(
                "node_rank",
                f"{self.node_rank} is outside [0, {self.nnodes}) for nnodes={self.nnodes}",
                f"Pass --node-rank between 0 and {self.nnodes - 1} on each node",
            )
        launcher = self.launcher  # None: the library lacks that framework
        if self.elastic and (launcher != "torchrun" or rdzv.backend != "c10d"):
            fixed = "the static rendezvous" if launcher == "torchrun" else "skrl's JAX launcher"
            raise rule(
                "nnodes",
                f"{self.nnodes_text} (elastic membership) needs torchrun's c10d rendezvous, but "
                f"{fixed} needs a fixed number of nodes",
                f"Give a fixed count such as --nnodes {self.nnodes}"
                + (", or add --rdzv-backend c10d --rdzv-endpoint host:port" if launcher == "torchrun" else ""),
            )
        if launcher is None:
            having = [lib for lib in LIBRARIES if self.ml_framework in frameworks_of(lib)]
            raise rule(
                "ml_framework",
                f"{self.ml_framework} only works with {', '.join(having)}, not {self.lib}",
                f"Use --lib {having[0]} --ml-framework {self.ml_framework}, or --ml-framework torch",
            )
        if launcher == "skrl-jax" and self.entrypoint is not None and "script" not in self.entrypoint:
            raise rule(
                "entrypoint",
                "skrl's JAX launcher runs a script file (python -m skrl.utils.distributed.jax ... PATH ARGS)",
                "Use --script PATH with --lib skrl --ml-framework jax",
            )
        if launcher == "skrl-jax":
            check_jax(self)
        else:
            if self.coordinator_address is not None:
                raise rule(
                    "coordinator_address",
                    f"only applies to skrl with JAX, not {self.lib} with {self.ml_framework}",
                    "For torchrun use --master-addr/--master-port (static) or --rdzv-endpoint (c10d)",
                )
            check_torchrun(self)
        return self

    def to_plain(self) -> dict[str, Any]:
        """A plain dict (YAML/JSON-ready) of the spec with secret-looking env values masked."""
        data = self.model_dump()
        if self.total_env_steps is not None:
            data["max_iterations"] = None  # the worker derives the iterations from the budget
        data["env"] = mask_env(self.env)
        data["overrides"] = list(self.overrides)
        data["args"] = list(self.args)
        return data


# Input keys of the spec (``min_nnodes`` is derived from ``nnodes: "MIN:MAX"``, never given).
# torchrun's agent options: a dry run lists them only when set (older plans print as before).
AGENT_OPTION_FIELDS: tuple[str, ...] = ("virtual_local_rank", "monitor_interval_s", "start_method")

# The spec fields only our worker understands (an entry point of the user's cannot take them).
WORKER_ONLY_FIELDS: tuple[str, ...] = (
    "task", "task_module", "num_envs", "max_iterations", "total_env_steps", "overrides", "resume",
    "checkpoint_interval", "hang_timeout_s", "logger", *WORKER_OPTION_FIELDS,
)  # fmt: skip

# The hand-written fields in their order, then the worker options' (their base class puts them first).
INPUT_FIELDS: tuple[str, ...] = (
    *(name for name in RunSpec.model_fields if name not in ("min_nnodes", *WORKER_OPTION_FIELDS)),
    *WORKER_OPTION_FIELDS,
)

FIELDS: tuple[str, ...] = (
    *(name for name in INPUT_FIELDS if name != "rendezvous"),
    *(f"rendezvous.{name}" for name in Rendezvous.model_fields),
)


def field_default(dotted: str) -> Any:
    """The schema's default of a dotted spec field (``rendezvous.id`` -> ``None``): the help's
    stated defaults and a cluster-file node's unset fields read it here."""
    section, _, name = dotted.rpartition(".")
    model = Rendezvous if section == "rendezvous" else RunSpec
    return model.model_fields[name].get_default(call_default_factory=True)
