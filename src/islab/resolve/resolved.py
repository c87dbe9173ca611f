"""What resolution hands on: the validated spec, and where each of its values came from.

:class:`ResolvedSpec` is the pipeline's result (:mod:`islab.resolve.pipeline`) and what the planner and
the dry run read. It lives apart from the pipeline because the pipeline reaches the machine (the
:mod:`edge <islab.resolve.edge>` imports the task registry, which may start a child process) while
the planner, which only needs this value, must stay pure (``tests/project/test_import_graph.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from islab.resolve.job import JobIdentity
from islab.resolve.layers import Source
from islab.spec.dotted import field_value
from islab.spec.run_spec import FIELDS, RunSpec


@dataclass(frozen=True)
class ResolvedSpec:
    """The validated spec plus, per dotted field name, which layer supplied it."""

    spec: RunSpec
    sources: Mapping[str, Source] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)
    cluster_file: str | None = None
    # The scheduler job this launch is part of (None: none), from the allocation that supplied fields.
    job: JobIdentity | None = None
    num_envs_auto: bool = False  # the cluster file said num_envs: auto (applied after resolution: islab.fit.auto)

    def explain(self) -> list[tuple[str, Any, Source]]:
        """(field, value, source) for every field, in schema order; secrets masked."""
        plain = self.spec.to_plain()
        rows = []
        for name in FIELDS:
            rows.append((name, field_value(plain, name), self.sources.get(name, Source.DEFAULT)))
        return rows
