"""Node agreement: one node of a multi-node cluster file may not change what every node shares.

Every node of a cluster file's job runs the same file; a per-node option (command line,
``ISLAB_*``) that gives a field every node must agree on
(:data:`~islab.spec.launch_rules.SHARED_FIELDS`: the library, the task, the seed, ...) another
value than the file does -- its own value, or the default when it sets none -- would leave the
nodes hanging at the rendezvous or training different things. It applies to one node of the
file's multi-node job (``--node-rank`` given); elsewhere the command line still overrides the file
as usual (e.g. reusing a file's settings for one node). Inside a scheduler allocation every node
gets the same command line, so its options are shared already and nothing is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from islab.libs.registry import launcher_of
from islab.resolve.layers import RIVALS, Layer, Merged, Source
from islab.resolve.messages import label_of
from islab.resolve.sources import file_name_of
from islab.spec.fields import DEFAULT_TASK, parse_node_range
from islab.spec.issues import Issue
from islab.spec.launch_rules import shared_fields
from islab.spec.run_spec import RunSpec, field_default


def node_agreement_issue(
    spec: RunSpec,
    file_layer: Layer,
    given: Merged,
    task_default_envs: Callable[[str], int | None],
) -> Issue | None:
    """The first shared field this node sets differently from the cluster file, or None.

    ``given``: the merged layers before the presets rewrote them (with their sources and origins);
    ``task_default_envs``: what a node running the file alone gets for ``num_envs``."""
    file = file_layer.values
    file_nnodes = parse_node_range(str(file["nnodes"].value)) if "nnodes" in file else None
    if spec.node_rank is None or spec.nnodes <= 1 or file_nnodes is None or file_nnodes[1] <= 1:
        return None
    file_name = file_name_of(file_layer)
    for name in shared_fields(launcher_of(spec.lib, spec.ml_framework)):
        if given.sources.get(name) not in (Source.CLI, Source.ENV) or name not in given:
            continue  # from the file, a default, or derived by a preset from a field checked itself
        shared = file[name].value if name in file else _shared_default(name, file, task_default_envs)
        replaced = RIVALS.get(name) in file  # e.g. --max-iterations over the file's total_env_steps
        if replaced or _comparable(name, given.values[name]) != _comparable(name, shared):
            what = (
                f"the file's {RIVALS[name]}"
                if replaced
                else (f"the file's {shared!r}" if name in file else f"the default {shared!r} (the file sets none)")
            )
            return Issue(
                label_of(name, given.origins),
                f"{given.values[name]!r} on this node differs from {what}, which every node of the {file_name} job "
                "must agree on (the other nodes would hang at the rendezvous or train something else)",
                f"Set it in {file_name} for all nodes, or drop the option",
            )  # fmt: skip
    return None


def _shared_default(name: str, file: Mapping[str, Any], task_default_envs: Callable[[str], int | None]) -> Any:
    """What a node running the cluster file alone gets for ``name``: the task's environment count,
    or the schema's default."""
    if name == "num_envs":
        return task_default_envs(file["task"].value if "task" in file else DEFAULT_TASK)
    return field_default(name)


def _comparable(name: str, value: Any) -> Any:
    """One form for a value as a layer gives it: ``2`` and ``"2:2"`` nodes, lists and tuples."""
    if name == "nnodes":
        return parse_node_range(str(value)) or value
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return dict(value) if isinstance(value, Mapping) else value
