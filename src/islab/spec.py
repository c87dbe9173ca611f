"""The run spec: one validated, immutable description of a training launch.

A launch is described by up to four *layers* of settings, highest precedence first:

1. the command line (``--num-envs 64``),
2. inside a SLURM allocation (``--slurm`` or under ``srun``): the allocation's node count, node
   rank and rendezvous address (:mod:`islab.slurm`),
3. ``ISLAB_*`` environment variables (``ISLAB_NUM_ENVS=64``),
4. a YAML cluster file (``--cluster two-node.yaml``), shared by every node of a cluster,
5. built-in defaults.

:func:`resolve_spec` merges them field by field (a command-line ``--master-port`` overrides the
file's ``rendezvous.master_port`` but keeps its ``master_addr``), validates the result once, and
returns a :class:`ResolvedSpec`: the frozen :class:`RunSpec` plus, for every field, the layer it
came from. Nothing is launched before this succeeds, and every way it can fail is a
:class:`SpecError` carrying one-line, human messages of the form
``error: <field>: <what is wrong>. <how to fix it>.`` -- never a pydantic dump or a traceback.

Settings that are only known on the machine that launches (a free port, the GPU count, the clock)
are *not* filled in here: the spec keeps ``None`` for "not given", so the rules "JAX-only option on
a torch launcher" or "multi-node without a master address" can tell an explicit value from a
default. :mod:`islab.plan` fills those in.

This module must stay importable without torch (``--help``, ``--dry-run`` and spec errors are
called often by CI and must be instant).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from islab.agent_config import AgentConfigError, load_agent_config
from islab.budget import rollout_length
from islab.tasks import LIBRARIES, TASKS, agent_config_path

Lib = Literal["rl_games", "rsl_rl", "skrl"]
MLFramework = Literal["torch", "jax"]
Device = Literal["cuda", "cpu"]
RdzvBackend = Literal["static", "c10d"]

CHOICES: dict[str, tuple[str, ...]] = {
    "lib": LIBRARIES,
    "ml_framework": ("torch", "jax"),
    "device": ("cuda", "cpu"),
    "rendezvous.backend": ("static", "c10d"),
}

DEFAULT_TASK = "Islab-Cartpole-v0"
# Used for a multi-node static rendezvous that names no port: every node must agree on it without
# talking to each other first, so it cannot be probed. It is torchrun's own default.
DEFAULT_MULTINODE_MASTER_PORT = 29500
DEFAULT_C10D_ID = "islab"
# How long node 0 waits for the other nodes to join before failing with a clear message. JAX's own
# default for jax.distributed.initialize; torchrun would wait 900 s (static) / 600 s (c10d).
DEFAULT_RDZV_TIMEOUT_S = 300
# ``nnodes: "MIN:MAX"``: elastic membership (torchrun c10d only).
NODE_RANGE_PATTERN = re.compile(r"(\d+):(\d+)")

# Used with fullmatch: "$" alone would accept a trailing newline.
RUN_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
OVERRIDE_PATTERN = re.compile(r"^\+?[A-Za-z_][A-Za-z0-9_.\-]*=")  # "+key=value" adds a key on purpose
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_PATTERN = re.compile(rf"(?=.{{1,253}}\Z){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
# The launchers set these per rank; a user value would silently be overwritten or break the group.
RESERVED_ENV = frozenset(
    {
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "JAX_RANK", "JAX_LOCAL_RANK", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR",
        "JAX_COORDINATOR_PORT",
    }
)  # fmt: skip
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
SECRET_MASK = "****"


class Source(str, Enum):
    """Which layer a resolved value came from."""

    CLI = "cli"
    SLURM = "slurm"
    ENV = "env"
    FILE = "file"
    DEFAULT = "default"


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Issue:
    """One problem with the spec: which field, what is wrong, how to fix it."""

    field: str
    problem: str
    fix: str

    def message(self) -> str:
        fix = self.fix if self.fix.endswith(("?", "!", ".")) else f"{self.fix}."
        return f"error: {self.field}: {self.problem.rstrip('.')}. {fix}"


class SpecError(Exception):
    """The spec cannot be used; ``issues`` holds one human message per problem."""

    def __init__(self, issues: list[Issue] | Issue):
        self.issues = tuple(issues) if isinstance(issues, list) else (issues,)
        super().__init__("\n".join(issue.message() for issue in self.issues))


def _rule(field_name: str, problem: str, fix: str, *, given_by: str | None = None) -> PydanticCustomError:
    """A validation failure that already speaks human: field, problem and fix travel in ctx.
    ``given_by`` names another field whose origin (``--max-iterations``, ``cpu.yaml: ...``) the
    message should add, since only :func:`resolve_spec` knows where values came from."""
    ctx = {"field": field_name, "problem": problem, "fix": fix}
    if given_by is not None:
        ctx["given_by"] = given_by
    return PydanticCustomError("spec_rule", "{problem}", ctx)


def suggest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    """ "did you mean 'x'?" for the closest candidate, or an empty string."""
    lowered = {c.lower(): c for c in candidates}
    matches = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return f"did you mean '{lowered[matches[0]]}'?" if matches else ""


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` fit for printing: secret-looking values replaced by ``****``."""
    return {name: (SECRET_MASK if is_secret_name(name) else value) for name, value in env.items()}


# ----------------------------------------------------------------------------------------------
# Host names and addresses
# ----------------------------------------------------------------------------------------------


def is_valid_host(host: str) -> bool:
    """A DNS host name (RFC 1123 labels) or an IPv4/IPv6 literal; nothing a shell could mis-read."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(HOSTNAME_PATTERN.fullmatch(host))


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); raises ValueError with a reason."""
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError("an IPv6 address must be written [addr]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError("it has no ':port'")
        if ":" in host:
            raise ValueError("write an IPv6 address as [addr]:port")
    if not is_valid_host(host):
        raise ValueError(f"'{host}' is not a valid host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"the port '{port_text}' is not a number between 1 and 65535")
    return host, int(port_text)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ----------------------------------------------------------------------------------------------
# The schema
# ----------------------------------------------------------------------------------------------

Count = Annotated[StrictInt, Field(ge=1)]
NonNegative = Annotated[StrictInt, Field(ge=0)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]


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
    # skrl-JAX: enforced by the supervisor). Applies to every launcher.
    timeout_s: Count = DEFAULT_RDZV_TIMEOUT_S

    @field_validator("master_addr")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None and not is_valid_host(value):
            raise _rule(
                "rendezvous.master_addr",
                f"{value!r} is not a valid host name or IP address",
                "Give node 0's address, e.g. 10.0.0.1 or node0.cluster (no spaces or shell characters)",
            )
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                split_host_port(value)
            except ValueError as reason:
                raise _rule(
                    "rendezvous.endpoint",
                    f"{value!r} is not host:port ({reason})",
                    "Write it as host:port, e.g. node0.cluster:29400",
                ) from None
        return value

    @field_validator("id")
    @classmethod
    def _rdzv_id(cls, value: str | None) -> str | None:
        if value is not None and not RUN_NAME_PATTERN.fullmatch(value):
            raise _rule(
                "rendezvous.id",
                f"{value!r} contains characters other than letters, digits, '.', '_' and '-'",
                "Use a plain job id such as job-42",
            )
        return value


class RunSpec(_Frozen):
    """Everything needed to plan a launch. Immutable; built only through validation."""

    lib: Lib = "rsl_rl"
    ml_framework: MLFramework = "torch"
    task: StrictStr = DEFAULT_TASK
    num_envs: Count = TASKS[DEFAULT_TASK].default_num_envs
    seed: NonNegative = 42
    # Per run: every rank does this many updates. Ignored when ``total_env_steps`` is given (the
    # worker derives the iterations from it); giving both is an error.
    max_iterations: Count = 150
    # A budget for the whole job: env steps summed over all ranks (see islab.budget).
    total_env_steps: Count | None = None
    # The number of nodes; with ``nnodes: "MIN:MAX"`` (c10d only) this is MAX and ``min_nnodes`` is
    # MIN. ``min_nnodes`` is not an input key: it only comes from the range, and the spec prints
    # and serializes ``nnodes`` back as ``"MIN:MAX"``.
    nnodes: Count = 1
    min_nnodes: Count | None = Field(default=None, exclude=True)
    nproc_per_node: Count = 1
    node_rank: NonNegative | None = None
    device: Device = "cuda"
    rendezvous: Rendezvous = Field(default_factory=Rendezvous)
    max_restarts: NonNegative = 0
    coordinator_address: StrictStr | None = None
    env: Mapping[str, str] = Field(default_factory=dict, validate_default=True)
    run_name: StrictStr | None = None
    log_dir: StrictStr = "logs"
    python: StrictStr = sys.executable
    overrides: tuple[StrictStr, ...] = ()
    # Continue a run: its directory (training goes on in it) or a checkpoint file (a new run dir).
    resume: StrictStr | None = None
    checkpoint_interval: NonNegative = 10

    # -- single fields --------------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _node_range(cls, data: Any) -> Any:
        """``nnodes: "MIN:MAX"`` -> ``nnodes = MAX``, ``min_nnodes = MIN`` (``"N:N"`` is just N)."""
        if not isinstance(data, Mapping):
            return data
        if "min_nnodes" in data:
            raise _rule(
                "min_nnodes",
                "is not a key of the spec",
                'Write an elastic node count as nnodes: "MIN:MAX" (quoted in YAML), or --nnodes MIN:MAX',
            )
        value = data.get("nnodes")
        if not isinstance(value, str):
            return data
        low_high = parse_node_range(value)
        if low_high is None:
            raise _rule(
                "nnodes",
                f"{value!r} is neither a whole number nor MIN:MAX",
                "Give the number of nodes, e.g. 2, or MIN:MAX such as 1:2 for elastic membership (c10d)",
            )
        low, high = low_high
        if low < 1 or high < 1:
            raise _rule("nnodes", f"{value!r}: MIN and MAX must both be at least 1", "Use e.g. 1:2")
        if low > high:
            raise _rule("nnodes", f"{value!r}: MIN is larger than MAX", f"Write it as {high}:{low}")
        return {**data, "nnodes": high, "min_nnodes": low if low < high else None}

    @model_validator(mode="before")
    @classmethod
    def _budget_or_iterations(cls, data: Any) -> Any:
        """``total_env_steps`` decides the iterations, so an explicit ``max_iterations`` (a key that
        is present at all: defaults are not) contradicts it."""
        if isinstance(data, Mapping) and data.get("total_env_steps") is not None and "max_iterations" in data:
            raise _rule(
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
    def nnodes_text(self) -> str:
        """``nnodes`` as torchrun's ``--nnodes`` takes it: ``"2"`` or ``"1:2"``."""
        return str(self.nnodes) if self.min_nnodes is None else f"{self.min_nnodes}:{self.nnodes}"

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value not in TASKS:
            hint = suggest(value, list(TASKS))
            raise _rule(
                "task",
                f"unknown task {value!r}",
                f"{hint + ' ' if hint else ''}Known tasks: {', '.join(TASKS)}",
            )
        return value

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, value: str | None) -> str | None:
        if value is not None and (not RUN_NAME_PATTERN.fullmatch(value) or value in {".", ".."}):
            raise _rule(
                "run_name",
                f"{value!r} may only contain letters, digits, '.', '_' and '-'",
                "Pick a name like baseline_2gpu (it becomes part of a directory name)",
            )
        return value

    @field_validator("log_dir", "python", "resume")
    @classmethod
    def _printable_path(cls, value: str | None, info: Any) -> str | None:
        if value is None and info.field_name == "resume":
            return value
        if not value or any(ch in value for ch in "\n\r\0"):
            raise _rule(
                info.field_name,
                f"{value!r} is empty or contains a line break",
                "Give a plain path",
            )
        return value

    @field_validator("coordinator_address")
    @classmethod
    def _coordinator(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                split_host_port(value)
            except ValueError as reason:
                raise _rule(
                    "coordinator_address",
                    f"{value!r} is not host:port ({reason})",
                    "Write node 0's address as host:port, e.g. 10.0.0.1:5000",
                ) from None
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_as_text(cls, value: Any) -> Any:
        # YAML turns `NCCL_P2P_DISABLE: 1` into an int; environment values are text anyway.
        # Booleans are refused: YAML's yes/no/on/off would silently become "True"/"False".
        if not isinstance(value, Mapping):
            return value
        converted: dict[Any, Any] = {}
        for name, item in value.items():
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise _rule(
                    f"env.{name}",
                    f"expected a text value, got {item!r} ({type(item).__name__})",
                    'Quote it, e.g. NCCL_DEBUG: "INFO" or FLAG: "1"',
                )
            converted[name] = str(item)
        return converted

    @field_validator("env", mode="after")
    @classmethod
    def _env_names(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        for name in value:
            if not ENV_NAME_PATTERN.fullmatch(name):
                raise _rule(
                    f"env.{name}",
                    "is not a valid environment variable name",
                    "Use letters, digits and '_' only, not starting with a digit",
                )
            if name in RESERVED_ENV:
                raise _rule(
                    f"env.{name}",
                    "is set per rank by the launcher and cannot be overridden",
                    "Remove it from env",
                )
        return MappingProxyType(dict(value))

    @field_validator("overrides", mode="after")
    @classmethod
    def _overrides(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not OVERRIDE_PATTERN.match(item):
                raise _rule(
                    "overrides",
                    f"{item!r} is not key=value",
                    "Write agent-config overrides as dotted.key=value, e.g. algorithm.learning_rate=0.0003",
                )
        return value

    @field_serializer("env")
    def _env_as_dict(self, value: Mapping[str, str]) -> dict[str, str]:
        return dict(value)

    # -- rules across fields ----------------------------------------------------------------------

    @model_validator(mode="after")
    def _cross_field_rules(self) -> RunSpec:
        rdzv = self.rendezvous
        if self.node_rank is not None and self.node_rank >= self.nnodes:
            raise _rule(
                "node_rank",
                f"{self.node_rank} is outside [0, {self.nnodes}) for nnodes={self.nnodes}",
                f"Pass --node-rank between 0 and {self.nnodes - 1} on each node",
            )
        if self.elastic and (self.ml_framework == "jax" or rdzv.backend != "c10d"):
            launcher = "skrl's JAX launcher" if self.ml_framework == "jax" else "the static rendezvous"
            raise _rule(
                "nnodes",
                f"{self.nnodes_text} (elastic membership) needs torchrun's c10d rendezvous, but "
                f"{launcher} needs a fixed number of nodes",
                f"Give a fixed count such as --nnodes {self.nnodes}"
                + ("" if self.ml_framework == "jax" else ", or add --rdzv-backend c10d --rdzv-endpoint host:port"),
            )
        if self.ml_framework == "jax":
            self._check_jax(rdzv)
        else:
            if self.coordinator_address is not None:
                raise _rule(
                    "coordinator_address",
                    f"only applies to skrl with JAX, not {self.lib} with {self.ml_framework}",
                    "For torchrun use --master-addr/--master-port (static) or --rdzv-endpoint (c10d)",
                )
            self._check_torchrun(rdzv)
        if self.resume is not None and self.node_rank in (None, 0):
            self._check_resume_path(Path(self.resume))
        try:
            # The rollout length turns iterations into env steps (islab.budget; the dry run shows it).
            rollout_length(self.lib, load_agent_config(self.lib, self.task, self.overrides))
        except AgentConfigError as error:
            raise _rule(
                error.field, error.message, f"The keys are those of {agent_config_path(self.lib, self.task)}"
            ) from None
        return self

    @staticmethod
    def _check_resume_path(path: Path) -> None:
        # Only node 0 reads the checkpoint (it broadcasts it), so other nodes need not have it.
        checkpoint = path / "checkpoints" / "latest.pt" if path.is_dir() else path
        if not checkpoint.is_file():
            raise _rule(
                "resume",
                f"{str(path)!r} is neither a checkpoint file nor a run directory with checkpoints/latest.pt",
                "Pass the run directory printed at the end of a run, or one of its checkpoints/*.pt files",
            )

    @property
    def resumes_run_dir(self) -> bool:
        """``--resume RUN_DIR`` continues in that run directory (TensorBoard, logs, checkpoints)."""
        return self.resume is not None and Path(self.resume).is_dir()

    def _check_jax(self, rdzv: Rendezvous) -> None:
        if self.lib != "skrl":
            raise _rule(
                "ml_framework",
                f"jax only works with skrl, not {self.lib}",
                "Use --lib skrl --ml-framework jax, or --ml-framework torch",
            )
        torchrun_only = {
            "rendezvous.backend": rdzv.backend != "static",
            "rendezvous.master_addr": rdzv.master_addr is not None,
            "rendezvous.master_port": rdzv.master_port is not None,
            "rendezvous.endpoint": rdzv.endpoint is not None,
            "rendezvous.id": rdzv.id is not None,
            "max_restarts": self.max_restarts > 0,
        }
        for name, given in torchrun_only.items():
            if given:
                raise _rule(
                    name,
                    "is a torchrun option; skrl with JAX is launched by skrl's JAX launcher",
                    "Remove it; give node 0's address with --coordinator-address host:port instead",
                )
        if self.nnodes > 1 and self.coordinator_address is None:
            raise _rule(
                "coordinator_address",
                f"a {self.nnodes}-node JAX run needs node 0's coordinator address",
                "Pass --coordinator-address <node0-host>:<port> (the same on every node)",
            )

    def _check_torchrun(self, rdzv: Rendezvous) -> None:
        if rdzv.backend == "static":
            for name, value, fix in (
                ("rendezvous.endpoint", rdzv.endpoint, "use --master-addr/--master-port"),
                ("rendezvous.id", rdzv.id, "remove it"),
            ):
                if value is not None:
                    raise _rule(
                        name,
                        "only applies to the c10d rendezvous",
                        f"Add --rdzv-backend c10d, or {fix}",
                    )
            if self.nnodes > 1 and rdzv.master_addr is None:
                raise _rule(
                    "rendezvous.master_addr",
                    f"a {self.nnodes}-node static rendezvous needs node 0's address",
                    "Pass --master-addr <node0-host> (and --master-port) on every node, "
                    "or use --rdzv-backend c10d --rdzv-endpoint host:port",
                )
        else:
            for name, value in (
                ("rendezvous.master_addr", rdzv.master_addr),
                ("rendezvous.master_port", rdzv.master_port),
            ):
                if value is not None:
                    raise _rule(
                        name,
                        "only applies to the static rendezvous; c10d uses the endpoint",
                        "Use --rdzv-endpoint host:port instead",
                    )
            if self.nnodes > 1 and rdzv.endpoint is None:
                raise _rule(
                    "rendezvous.endpoint",
                    f"a {self.nnodes}-node c10d rendezvous needs an endpoint every node can reach",
                    "Pass --rdzv-endpoint <host>:<port> (and --rdzv-id) on every node",
                )

    def to_plain(self) -> dict[str, Any]:
        """A plain dict (YAML/JSON-ready) of the spec with secret-looking env values masked."""
        data = self.model_dump()
        if self.total_env_steps is not None:
            data["max_iterations"] = None  # the worker derives the iterations from the budget
        data["env"] = mask_env(self.env)
        data["overrides"] = list(self.overrides)
        return data


def parse_node_range(text: str) -> tuple[int, int] | None:
    """``"1:2"`` -> (1, 2); ``"2"`` -> (2, 2); anything else -> None."""
    text = text.strip()
    if text.isdigit():
        return int(text), int(text)
    match = NODE_RANGE_PATTERN.fullmatch(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


# Input keys of the spec (``min_nnodes`` is derived from ``nnodes: "MIN:MAX"``, never given).
INPUT_FIELDS: tuple[str, ...] = tuple(name for name in RunSpec.model_fields if name != "min_nnodes")

FIELDS: tuple[str, ...] = (
    *(name for name in INPUT_FIELDS if name != "rendezvous"),
    *(f"rendezvous.{name}" for name in Rendezvous.model_fields),
)


# ----------------------------------------------------------------------------------------------
# Layers and resolution
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provided:
    """A value from one layer and the words that name where it came from (for messages)."""

    value: Any
    origin: str  # e.g. "--gpus", "ISLAB_NUM_ENVS", "two-node.yaml: rendezvous.master_port"


@dataclass(frozen=True)
class ResolvedSpec:
    """The validated spec plus, per dotted field name, which layer supplied it."""

    spec: RunSpec
    sources: Mapping[str, Source] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)
    cluster_file: str | None = None

    def explain(self) -> list[tuple[str, Any, Source]]:
        """(field, value, source) for every field, in schema order; secrets masked."""
        plain = self.spec.to_plain()
        rows = []
        for name in FIELDS:
            section, _, key = name.rpartition(".")
            value = plain[section][key] if section else plain[key]
            rows.append((name, value, self.sources.get(name, Source.DEFAULT)))
        return rows


def load_cluster_file(path: Path) -> dict[str, Provided]:
    """Read a YAML cluster spec into a flat layer keyed by dotted field names.

    Only reading and shape checks happen here; types and unknown keys are left to the schema so
    that all of those messages come from one place.
    """
    import yaml  # lazy: only paid when a cluster file is given

    label = f"--cluster {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            Issue(label, "the file does not exist", "Check the path (configs/cluster/ has examples)")
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(
            Issue(label, f"cannot read the file ({reason})", "Check the path and its permissions")
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(Issue(label, f"malformed YAML{where}: {problem}", "Fix the YAML syntax there")) from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise SpecError(
            Issue(
                label,
                f"the file is {kind}",
                "A cluster file is a mapping of keys such as lib: rsl_rl, nnodes: 2",
            )
        )
    if isinstance(data.get("nnodes"), int) and re.search(r"^nnodes\s*:\s*\d+\s*:\s*\d+", text, re.MULTILINE):
        # YAML 1.1 reads an unquoted 1:2 as the base-60 number 62.
        raise SpecError(
            Issue(
                f"{path.name}: nnodes",
                f"the unquoted node range was read by YAML as the number {data['nnodes']}",
                'Quote it: nnodes: "1:2"',
            )
        )
    layer: dict[str, Provided] = {}
    for key, value in data.items():
        if key == "rendezvous" and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                dotted = f"rendezvous.{sub_key}"
                layer[dotted] = Provided(sub_value, f"{path.name}: {dotted}")
        else:
            layer[str(key)] = Provided(value, f"{path.name}: {key}")
    return layer


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        if dotted.startswith("rendezvous.") and not isinstance(nested.get("rendezvous", {}), dict):
            continue  # `rendezvous: 5` in a file: leave the type error to the schema
        if dotted.startswith("rendezvous."):
            nested.setdefault("rendezvous", {})[dotted.split(".", 1)[1]] = value
        else:
            nested[dotted] = value
    return nested


_RIVALS = {"total_env_steps": "max_iterations", "max_iterations": "total_env_steps"}


def resolve_spec(
    cli: Mapping[str, Provided] | None = None,
    env: Mapping[str, Provided] | None = None,
    cluster_file: Path | None = None,
    slurm: Callable[[Mapping[str, Any]], Mapping[str, Provided]] | None = None,
) -> ResolvedSpec:
    """Merge command line > SLURM allocation > environment > cluster file > defaults, then
    validate once.

    ``cli`` and ``env`` are flat layers keyed by dotted field names (``rendezvous.master_port``);
    absent keys mean "not given". ``slurm``, when running inside a SLURM allocation, builds the
    allocation's layer (nodes, node rank, rendezvous) from the values the other layers chose --
    where the rendezvous goes depends on the launcher and backend (see :mod:`islab.slurm`).
    Raises :class:`SpecError` with human messages.
    """
    file_layer = load_cluster_file(cluster_file) if cluster_file is not None else {}
    slurm_layer: Mapping[str, Provided] = {}
    if slurm is not None:
        chosen: dict[str, Any] = {}
        for layer in (file_layer, env or {}, cli or {}):
            chosen.update({name: provided.value for name, provided in layer.items()})
        slurm_layer = slurm(chosen)
    layers = (
        (Source.CLI, cli or {}),
        (Source.SLURM, slurm_layer),
        (Source.ENV, env or {}),
        (Source.FILE, file_layer),
    )

    merged: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    origins: dict[str, str] = {}
    for source, layer in reversed(layers):  # lowest precedence first, higher ones overwrite
        # The two ways of saying how long to train replace each other across layers, as one value
        # replaces another: --total-env-steps on the command line beats max_iterations in a
        # cluster file. Both in one layer is a contradiction, reported by RunSpec.
        for name, rival in _RIVALS.items():
            if name in layer and rival not in layer:
                for held in (merged, sources, origins):
                    held.pop(rival, None)
        for name, provided in layer.items():
            merged[name] = provided.value
            sources[name] = source
            origins[name] = provided.origin

    # The default number of environments belongs to the task, so it is filled after merging.
    if "num_envs" not in merged and merged.get("task", DEFAULT_TASK) in TASKS:
        merged["num_envs"] = TASKS[merged.get("task", DEFAULT_TASK)].default_num_envs

    try:
        spec = RunSpec.model_validate(_unflatten(merged))
    except ValidationError as exc:
        raise SpecError([_issue_from_pydantic(err, origins) for err in exc.errors()]) from None
    return ResolvedSpec(
        spec=spec,
        sources=MappingProxyType(sources),
        origins=MappingProxyType(origins),
        cluster_file=str(cluster_file) if cluster_file is not None else None,
    )


# ----------------------------------------------------------------------------------------------
# pydantic errors -> one human line each
# ----------------------------------------------------------------------------------------------

_FIELD_FIX = {
    "num_envs": "Give the number of parallel environments per rank, e.g. 4096",
    "max_iterations": "Give the number of training iterations (each rank runs them all), e.g. 150",
    "total_env_steps": "Give the env steps to train, summed over all ranks, e.g. 1000000",
    "nnodes": "Give the number of machines, e.g. 2",
    "nproc_per_node": "Give the processes per node, e.g. --gpus 2 or --device cpu --nproc 2",
    "node_rank": "Give this node's index, 0 for the first node",
    "seed": "Give a whole number ≥ 0, e.g. 42",
    "max_restarts": "Give a whole number ≥ 0, e.g. 0",
    "rendezvous.master_port": "Choose a port between 1 and 65535, e.g. 29500",
    "rendezvous.timeout_s": "Give the seconds node 0 waits for the other nodes, e.g. 300",
    "checkpoint_interval": "Give the iterations between checkpoints, e.g. 10 (0: only at the end)",
}


def _label(dotted: str, origins: Mapping[str, str]) -> str:
    origin = origins.get(dotted)
    if origin is None or origin.endswith(f": {dotted}"):
        # file values: "two-node.yaml: nnodes" already names the field
        return origin or dotted
    return f"{dotted} ({origin})"


def _issue_from_pydantic(err: Mapping[str, Any], origins: Mapping[str, str]) -> Issue:
    loc = [str(part) for part in err["loc"]]
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "spec_rule":
        dotted = ctx.get("field") or ".".join(loc)
        label = _env_label(dotted, origins) if dotted.startswith("env.") else _label(dotted, origins)
        problem = ctx["problem"]
        if ctx.get("given_by"):
            origin = origins.get(ctx["given_by"])
            problem = f"{problem} (given by {origin})" if origin else problem
        return Issue(label, problem, ctx["fix"])
    # Errors inside a mapping/tuple (env.NAME, overrides.0) are reported on the parent field.
    dotted = ".".join(loc[:2]) if loc and loc[0] == "rendezvous" else (loc[0] if loc else "spec")
    label = _label(dotted, origins)
    fix = _FIELD_FIX.get(dotted, "See docs/CLI.md for the field's format")

    if kind == "extra_forbidden":
        parent_fields = list(Rendezvous.model_fields) if loc[0] == "rendezvous" else [*INPUT_FIELDS]
        unknown = loc[-1]
        hint = suggest(unknown, parent_fields)
        where = "rendezvous" if loc[0] == "rendezvous" else "the spec"
        file_origin = origins.get(dotted, dotted)
        return Issue(
            file_origin,
            f"unknown key {unknown!r} in {where}",
            f"{hint + ' ' if hint else ''}Valid keys: {', '.join(parent_fields)}",
        )
    if kind == "literal_error":
        choices = CHOICES.get(dotted, ())
        hint = suggest(str(value), choices)
        return Issue(
            label,
            f"{value!r} is not one of {', '.join(choices)}",
            hint or f"Choose one of {', '.join(choices)}",
        )
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return Issue(label, f"expected a whole number, got {value!r} ({type(value).__name__})", fix)
    if kind in {"greater_than_equal", "less_than_equal"}:
        low, high = ctx.get("ge"), ctx.get("le")
        if dotted == "rendezvous.master_port":
            problem = f"port {value} is outside 1–65535"
        elif low == 1:
            problem = f"must be at least 1, got {value}"
        else:
            problem = f"must be ≥ {low}" + (f" and ≤ {high}" if high is not None else "") + f", got {value}"
        return Issue(label, problem, fix)
    if kind in {"string_type", "str_type"}:
        return Issue(label, f"expected text, got {value!r} ({type(value).__name__})", "Quote the value")
    if kind in {"dict_type", "model_type", "mapping_type"}:
        return Issue(label, f"expected a mapping, got {value!r}", "Write it as nested key: value lines")
    if kind in {"tuple_type", "list_type"}:
        return Issue(label, f"expected a list, got {value!r}", "Write it as a YAML list")
    return Issue(label, str(err.get("msg", "invalid value")), fix)


def _env_label(dotted: str, origins: Mapping[str, str]) -> str:
    origin = origins.get("env")
    return f"{origin.rsplit(':', 1)[0]}: {dotted}" if origin and ":" in origin else dotted
