"""Resuming a run by its directory alone: the stored spec becomes a layer of settings.

``islab-train --resume RUN_DIR`` needs no other option: the run's ``launch.yaml`` (written by
the launcher at every launch, :mod:`islab.rundir`) holds the resolved spec and where each field
came from. :func:`stored_layer` turns the fields the user chose back then (every source but the
defaults) into a layer just above the defaults, so anything given now -- command line,
``ISLAB_*``, a cluster file -- overrides it. A few fields cannot change across a resume, because
the checkpoint holds state shaped by them (the library's and framework's state, the task's
observation and action sizes, one environment state per env on each rank):
:func:`frozen_field_issue` refuses a change of those before anything is launched.

Not carried over: ``resume`` itself, ``node_rank`` (each node gives its own), values that came
from a scheduler allocation (a requeued job has a new one) and masked secret ``env`` values.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from islab.resolve.allocations import ALLOCATION_SOURCES
from islab.rundir import LAUNCH_FILE, run_dir_of
from islab.spec.dotted import MISSING, field_value
from islab.spec.issues import SECRET_MASK, Issue

# What a checkpoint's state is shaped by (per-rank env count: one env state per environment).
FROZEN_FIELDS: tuple[str, ...] = ("lib", "ml_framework", "task", "num_envs")
_NOT_CARRIED = frozenset({"resume", "node_rank"})
_NOT_CARRIED_SOURCES = frozenset({"default", *(source.value for source in ALLOCATION_SOURCES)})

__all__ = ["FROZEN_FIELDS", "frozen_field_issue", "run_dir_of", "stored_layer"]  # run_dir_of: islab.rundir


def stored_layer(run_dir: Path) -> dict[str, tuple[Any, str]]:
    """The stored spec's chosen fields as ``{dotted field: (value, origin words)}``."""
    import yaml  # lazy: only paid on a resume

    try:
        record = yaml.safe_load((run_dir / LAUNCH_FILE).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    spec = record.get("spec") if isinstance(record, Mapping) else None
    sources = record.get("sources") if isinstance(record, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(sources, Mapping):
        return {}
    origin = f"{run_dir / LAUNCH_FILE}"
    layer: dict[str, tuple[Any, str]] = {}
    for dotted, source in sources.items():
        value = field_value(spec, str(dotted), missing=MISSING)
        if value is MISSING:
            continue
        if (dotted in _NOT_CARRIED or source in _NOT_CARRIED_SOURCES) and dotted not in FROZEN_FIELDS:
            continue
        if dotted == "env" and isinstance(value, Mapping):
            value = {name: text for name, text in value.items() if text != SECRET_MASK}
        if dotted == "overrides" and isinstance(value, list):
            value = tuple(value)
        if value is None:
            continue
        layer[dotted] = (value, f"{origin}: {dotted}")
    return layer


def frozen_field_issue(
    spec: Any, stored: Mapping[str, tuple[Any, str]], origins: Mapping[str, str], run_dir: Path
) -> Issue | None:
    """A change of a field that a checkpoint cannot follow, named with the option that asked."""
    for name in FROZEN_FIELDS:
        if name not in stored:
            continue
        old, new = stored[name][0], getattr(spec, name)
        if old == new:
            continue
        asked = origins.get(name, name)
        return Issue(
            f"{name} ({asked})",
            f"the run being resumed ({run_dir}) was trained with {name} {old!r}, and a resume cannot "
            f"change it to {new!r} (its checkpoint holds state shaped by it)",
            f"Drop {asked.split(':')[0]} to continue the run, or start a new run without --resume",
        )
    return None
