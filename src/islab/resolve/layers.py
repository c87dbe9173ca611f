"""Layers of settings and how they merge: the values every resolution step passes on.

A launch is described by *layers*, each a read-only mapping from a dotted field name
(``num_envs``, ``rendezvous.master_port``) to a :class:`Provided` value -- the value and the words
that say where it came from (``--num-envs``, ``ISLAB_SEED``, ``cpu.yaml: nnodes``). Each layer has a
:class:`Source`. :func:`merge` lays them over each other, lowest precedence first, into a
:class:`Merged` value: per field, the value, its source and its origin words. Nothing here is
changed in place: a step that rewrites fields (a preset, a derived default) returns a new
:class:`Merged` (:meth:`Merged.with_changes`).

Precedence, highest first: the command line, a scheduler allocation (SLURM, Kubernetes, SkyPilot;
every allocation reader is one source, :mod:`islab.resolve.allocations`), ``ISLAB_*`` variables, the
cluster file, the stored spec of a resumed run, the schema's defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any


class Source(str, Enum):
    """Which layer a resolved value came from."""

    CLI = "cli"
    SLURM = "slurm"
    K8S = "k8s"  # the Kubernetes job this pod belongs to (islab.k8s.allocation)
    SKY = "sky"  # the SkyPilot task this node runs (islab.sky.allocation)
    ENV = "env"
    FILE = "file"
    RESUMED = "resumed"  # the stored spec of the run being resumed (islab.resolve.resumed)
    DEFAULT = "default"
    FIT = "fit"  # --num-envs auto: islab-train fit's recommendation (islab.fit.auto), after resolution


@dataclass(frozen=True)
class Provided:
    """A value from one layer and the words that name where it came from (for messages)."""

    value: Any
    origin: str  # e.g. "--gpus", "ISLAB_NUM_ENVS", "two-node.yaml: rendezvous.master_port"


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Layer:
    """One source's settings, read-only."""

    source: Source
    values: Mapping[str, Provided] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _frozen(self.values))

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def __bool__(self) -> bool:
        return bool(self.values)


# The two ways of saying how long to train replace each other across layers, as one value
# replaces another: --total-env-steps on the command line beats max_iterations in a cluster
# file. Both in one layer is a contradiction, reported by RunSpec.
RIVALS: Mapping[str, str] = MappingProxyType({"total_env_steps": "max_iterations", "max_iterations": "total_env_steps"})


@dataclass(frozen=True)
class Merged:
    """The merged layers: per dotted field, its value, its source and its origin words."""

    values: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, Source] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("values", "sources", "origins"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def with_changes(
        self,
        values: Mapping[str, Any],
        sources: Mapping[str, Source] | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> Merged:
        """A new value with these fields replaced (and their sources/origins where given)."""
        return Merged(
            {**self.values, **values}, {**self.sources, **(sources or {})}, {**self.origins, **(origins or {})}
        )

    def editable(self) -> tuple[dict[str, Any], dict[str, Source], dict[str, str]]:
        """Plain copies, for the preset functions that rewrite fields in place."""
        return dict(self.values), dict(self.sources), dict(self.origins)


def merge(layers: Iterable[Layer]) -> Merged:
    """Merge ``layers`` given highest precedence first: a field takes the value of the highest
    layer that has it (see :data:`RIVALS` for the one pair of fields that replace each other)."""
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    origins: dict[str, str] = {}
    for layer in reversed(list(layers)):  # lowest precedence first, higher ones overwrite
        for name, rival in RIVALS.items():
            if name in layer and rival not in layer:
                for held in (values, sources, origins):
                    held.pop(rival, None)
        for name, provided in layer.values.items():
            values[name] = provided.value
            sources[name] = layer.source
            origins[name] = provided.origin
    return Merged(values, sources, origins)


def chosen_values(layers: Iterable[Layer]) -> dict[str, Any]:
    """The plain values of ``layers`` (given lowest precedence first), the higher winning: what a
    scheduler allocation is told the user chose, before it adds its own layer."""
    chosen: dict[str, Any] = {}
    for layer in layers:
        chosen.update({name: provided.value for name, provided in layer.values.items()})
    return chosen


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted field names -> the nested mapping the schema validates."""
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        if dotted.startswith("rendezvous.") and not isinstance(nested.get("rendezvous", {}), dict):
            continue  # `rendezvous: 5` in a file: leave the type error to the schema
        if dotted.startswith("rendezvous."):
            nested.setdefault("rendezvous", {})[dotted.split(".", 1)[1]] = value
        else:
            nested[dotted] = value
    return nested
