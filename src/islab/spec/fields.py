"""The building blocks of the run spec (torch-free, no file I/O): the value types and their choices,
the defaults the launcher fills in, the patterns an input must match (and ``nnodes: "MIN:MAX"`` read
as two fields), the ``Rendezvous`` sub-model, and the fields of the worker options generated from
their rows in :mod:`islab.spec.worker_args`.

:class:`~islab.spec.run_spec.RunSpec` is assembled from these and adds the rules across fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)

from islab.libs.registry import LIBRARIES, ML_FRAMEWORKS
from islab.spec.addresses import is_valid_host, split_host_port
from islab.spec.issues import rule
from islab.spec.worker_args import WorkerArg, choices_of, default_of, spec_options

Lib = Literal[tuple(LIBRARIES)]  # type: ignore[valid-type]  # the library registry names them
MLFramework = Literal[ML_FRAMEWORKS]  # type: ignore[valid-type]
Device = Literal[choices_of("device")]  # type: ignore[valid-type]  # the worker's argument lists them
RdzvBackend = Literal["static", "c10d"]
Logger = Literal[choices_of("logger")]  # type: ignore[valid-type]
StartMethod = Literal["spawn", "fork", "forkserver"]  # torchrun's --start-method

CHOICES: dict[str, tuple[str, ...]] = {
    "lib": tuple(LIBRARIES),
    "ml_framework": ML_FRAMEWORKS,
    "device": choices_of("device"),
    "rendezvous.backend": ("static", "c10d"),
    "logger": choices_of("logger"),
    "start_method": ("spawn", "fork", "forkserver"),
}

DEFAULT_TASK: str = default_of("task")
# The env count of a spec that no task's own default reached: one built in code, a user's entry
# point (never told it), a task whose registration cannot be read (the disk checks then refuse it).
# Resolution fills in the task's own (islab.resolve.steps.derive): the schema reads no task. Isaac
# Lab's usual count per GPU, and the default task's (``--help`` states it as such;
# tests/spec/test_spec.py holds the two equal).
FALLBACK_NUM_ENVS = 4096
# num_envs given as this word (--num-envs auto, ISLAB_NUM_ENVS=auto, a cluster file's num_envs: auto):
# islab-train fit's recommendation for the job (islab.fit.auto)
NUM_ENVS_AUTO = "auto"
# Used for a multi-node static rendezvous that names no port: every node must agree on it without
# talking to each other first, so it cannot be probed. It is torchrun's own default.
DEFAULT_MULTINODE_MASTER_PORT = 29500
DEFAULT_C10D_ID = "islab"
# How long the nodes wait for each other when no --rdzv-timeout is given: each launcher's own
# default, so islab passes no timeout of its own and a node whose Isaac Sim takes minutes to start
# gets as long as under torchrun by hand (torch 2.13: torchrun's LaunchConfig gives the static
# rendezvous ``timeout`` 900 s, launcher/api.py; c10d's ``join_timeout`` is 600 s,
# dynamic_rendezvous.py; skrl calls ``jax.distributed.initialize`` whose ``initialization_timeout`` is 300 s).
TORCHRUN_STATIC_RDZV_TIMEOUT_S = 900
TORCHRUN_C10D_JOIN_TIMEOUT_S = 600
JAX_INIT_TIMEOUT_S = 300
# ``nnodes: "MIN:MAX"``: elastic membership (torchrun c10d only).
NODE_RANGE_PATTERN = re.compile(r"(\d+):(\d+)")

# Used with fullmatch: "$" alone would accept a trailing newline.
RUN_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
MODULE_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
OVERRIDE_PATTERN = re.compile(r"^\+?[A-Za-z_][A-Za-z0-9_.\-]*=")  # "+key=value" adds a key on purpose
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


Count = Annotated[StrictInt, Field(ge=1)]
NonNegative = Annotated[StrictInt, Field(ge=0)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0)]


def host_port_field(field_name: str, value: str | None, fix: str) -> str | None:
    """A ``host:port`` field: valid host, port in 1-65535 (``None``: not given)."""
    if value is not None:
        try:
            split_host_port(value)
        except ValueError as reason:
            raise rule(field_name, f"{value!r} is not host:port ({reason})", fix) from None
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rendezvous(_Frozen):
    """How the ranks of all nodes find each other (torchrun); ``None`` means "not given"."""

    backend: RdzvBackend = "static"
    master_addr: StrictStr | None = None
    master_port: Port | None = None
    endpoint: StrictStr | None = None
    id: StrictStr | None = None
    # Seconds node 0 waits for every node to arrive (torchrun: rdzv_conf timeout / join_timeout;
    # skrl-JAX: enforced by the supervisor). Applies to every launcher. None: the launcher's own
    # default (see TORCHRUN_STATIC_RDZV_TIMEOUT_S; the planner's rendezvous_timeout_of).
    timeout_s: Count | None = None
    # c10d with nnodes MIN:MAX: once MIN nodes are in, how long the rendezvous waits for more before
    # training starts (torchrun's rdzv_conf last_call_timeout; None: torchrun's own 30 s).
    last_call_s: Count | None = None

    @field_validator("master_addr")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None and not is_valid_host(value):
            raise rule(
                "rendezvous.master_addr",
                f"{value!r} is not a valid host name or IP address",
                "Give node 0's address, e.g. 10.0.0.1 or node0.cluster (no spaces or shell characters)",
            )
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return host_port_field("rendezvous.endpoint", value, "Write it as host:port, e.g. node0.cluster:29400")

    @field_validator("id")
    @classmethod
    def _rdzv_id(cls, value: str | None) -> str | None:
        if value is not None and not RUN_NAME_PATTERN.fullmatch(value):
            raise rule(
                "rendezvous.id",
                f"{value!r} contains characters other than letters, digits, '.', '_' and '-'",
                "Use a plain job id such as job-42",
            )
        return value


def _worker_option_field(arg: WorkerArg) -> tuple[Any, Any]:
    """(annotation, default) of the spec field of a worker option declared only in its row."""
    kind: Any = {int: StrictInt, float: StrictFloat, bool: StrictBool}.get(arg.kind, StrictStr)
    if arg.choices is not None:
        kind = Literal[arg.choices]  # type: ignore[valid-type]
    if arg.minimum is not None:
        kind = Annotated[kind, Field(ge=arg.minimum)]
    return (kind | None if arg.default is None else kind), arg.default


# The fields of the worker options whose row in islab.spec.worker_args brings its own spec field
# (``cli``): a new option is that row, not a row plus a field here.
WorkerOptionFields = create_model(  # type: ignore[call-overload]
    "_WorkerOptions", __base__=_Frozen, **{arg.name: _worker_option_field(arg) for arg in spec_options()}
)
WORKER_OPTION_FIELDS: tuple[str, ...] = tuple(arg.name for arg in spec_options())


def parse_node_range(text: str) -> tuple[int, int] | None:
    """``"1:2"`` -> (1, 2); ``"2"`` -> (2, 2); anything else -> None."""
    text = text.strip()
    if text.isdigit():
        return int(text), int(text)
    match = NODE_RANGE_PATTERN.fullmatch(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def node_range_keys(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A spec's input with ``nnodes: "MIN:MAX"`` as ``nnodes = MAX``, ``min_nnodes = MIN`` (``"N:N"`` is
    just N). ``min_nnodes`` is not an input key: it only comes from the range."""
    if "min_nnodes" in data:
        raise rule(
            "min_nnodes",
            "is not a key of the spec",
            'Write an elastic node count as nnodes: "MIN:MAX" (quoted in YAML), or --nnodes MIN:MAX',
        )
    value = data.get("nnodes")
    if not isinstance(value, str):
        return data
    low_high = parse_node_range(value)
    if low_high is None:
        raise rule(
            "nnodes",
            f"{value!r} is neither a whole number nor MIN:MAX",
            "Give the number of nodes, e.g. 2, or MIN:MAX such as 1:2 for elastic membership (c10d)",
        )
    low, high = low_high
    if low < 1 or high < 1:
        raise rule("nnodes", f"{value!r}: MIN and MAX must both be at least 1", "Use e.g. 1:2")
    if low > high:
        raise rule("nnodes", f"{value!r}: MIN is larger than MAX", f"Write it as {high}:{low}")
    return {**data, "nnodes": high, "min_nnodes": low if low < high else None}
