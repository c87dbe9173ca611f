"""The sources of a launch's settings, each turned into a :class:`~islab.resolve.layers.Layer`.

=================  ==========================================================================
command line       the CLI builds it from click's values (:mod:`islab.cli.app`)
allocation         a scheduler's view of this node (SLURM): :func:`allocation_layers` asks each
                   active reader of :mod:`islab.resolve.allocations`, given what the other
                   layers chose (where the rendezvous goes depends on the launcher)
``ISLAB_*``        the CLI, from the options click read from the environment
cluster file       :func:`cluster_layer` parses the YAML text :func:`read_cluster_file` read
resumed run        :func:`resumed_layer`, from the launch record the edge read for ``--resume``
=================  ==========================================================================

Only :func:`read_cluster_file` touches the disk; everything else is a pure function of its
arguments. Types and unknown keys are left to the schema, so that all of those messages come from
one place (:mod:`islab.resolve.messages`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab.resolve.job import JobIdentity
from islab.resolve.layers import Layer, Provided, Source, chosen_values
from islab.spec.issues import Issue, SpecError

# -- the cluster file -------------------------------------------------------------------------------


def read_cluster_file(path: Path) -> str:
    """The edge: the cluster file's text, or a SpecError naming ``--cluster``."""
    label = f"--cluster {path}"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            Issue(label, "the file does not exist", "Check the path (configs/cluster/ has examples)")
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(
            Issue(label, f"cannot read the file ({reason})", "Check the path and its permissions")
        ) from None


def cluster_layer(text: str, path: Path) -> Layer:
    """A YAML cluster spec's text -> a flat layer keyed by dotted field names (shape checks only)."""
    import yaml  # lazy: only paid when a cluster file is given

    label = f"--cluster {path}"
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
            Issue(label, f"the file is {kind}", "A cluster file is a mapping of keys such as lib: rsl_rl, nnodes: 2")
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
    values: dict[str, Provided] = {}
    for key, value in data.items():
        if key == "rendezvous" and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                dotted = f"rendezvous.{sub_key}"
                values[dotted] = Provided(sub_value, f"{path.name}: {dotted}")
        else:
            values[str(key)] = Provided(value, f"{path.name}: {key}")
    return Layer(Source.FILE, values)


def file_name_of(file_layer: Layer) -> str:
    """The cluster file's name, as its origins give it (``two-node.yaml``)."""
    return next(iter(file_layer.values.values())).origin.split(":")[0]


# -- a scheduler allocation -------------------------------------------------------------------------

# What an allocation reader gives: the layer, built from what the other layers chose.
LayerBuilder = Callable[[Mapping[str, Any]], Mapping[str, Provided]]


@dataclass(frozen=True)
class AllocationSource:
    """An active scheduler allocation: its source, how it builds its layer, and which job it is
    (None: an allocation planned for a job that does not exist yet, as ``sbatch`` plans one)."""

    source: Source
    build: LayerBuilder
    job: JobIdentity | None = None


def allocation_layers(allocations: Sequence[AllocationSource], below: Iterable[Layer]) -> tuple[Layer, ...]:
    """Each active allocation's layer. ``below``: the file, ``ISLAB_*`` and command-line layers
    (lowest first), whose choices (launcher, rendezvous backend) decide where the rendezvous goes."""
    chosen = chosen_values(below)
    return tuple(Layer(allocation.source, allocation.build(chosen)) for allocation in allocations)


# -- the run being resumed ----------------------------------------------------------------------------


def resume_value(layers: Iterable[Layer]) -> Any:
    """The ``--resume`` value of the highest layer that gives one (layers highest first)."""
    return next((layer.values["resume"].value for layer in layers if "resume" in layer), None)


def resumed_layer(stored: Mapping[str, tuple[Any, str]]) -> Layer:
    """The stored spec of a resumed run (:func:`islab.resolve.resumed.stored_layer`) as a layer."""
    return Layer(Source.RESUMED, {name: Provided(*held) for name, held in stored.items()})
