"""Resolution as a pipeline: sources -> presets -> derived values -> validation -> node agreement.

::

    sources       cluster file (read at the edge), ISLAB_*, command line, each active scheduler
                  allocation (given what the others chose), the resumed run's stored spec
    merge         one value per field, with its source and origin words    (islab.resolve.layers)
    presets       --mjlab / --isaaclab -> entry point and its arguments     (islab.resolve.steps)
    task module   --task-module's tasks join the registry                   (the edge)
    derive        the task's default environment count                      (islab.resolve.steps)
    validate      the schema against the installed tasks' ids, errors named with their origin
                                                                            (islab.resolve.steps)
    checks        a resume keeps its frozen fields; the disk holds what the spec needs
    agreement     one node of a cluster file agrees with the file on shared fields
                                                                            (islab.resolve.agreement)
    task facts    the agent config's rollout length, for the planner's budget (the edge)

Each step takes immutable values and returns a new one (or raises :class:`SpecError`); what it
needs from the machine comes from the :class:`~islab.resolve.edge.Edge` passed in. The result,
:class:`ResolvedSpec`, keeps each field's source and origin: that is the dry run's "where each
value came from".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from islab.resolve.agreement import node_agreement_issue
from islab.resolve.edge import DiskEdge, Edge
from islab.resolve.layers import Layer, Merged, Source, merge
from islab.resolve.messages import label_of
from islab.resolve.resolved import ResolvedSpec
from islab.resolve.sources import AllocationSource, allocation_layers, cluster_layer, resume_value, resumed_layer
from islab.resolve.steps import apply_presets, derive, disk_issue, resumed_issue, take_file_auto, validate
from islab.spec.fields import MODULE_PATTERN
from islab.spec.issues import Issue, SpecError
from islab.tasks import TaskRegistrationError


@dataclass(frozen=True)
class Inputs:
    """What the command line hands resolution: its own two layers, the cluster file's path and the
    scheduler allocations this process runs in (:func:`islab.resolve.allocations.active_allocations`)."""

    cli: Layer = field(default_factory=lambda: Layer(Source.CLI))
    env: Layer = field(default_factory=lambda: Layer(Source.ENV))
    cluster_file: Path | None = None
    allocations: Sequence[AllocationSource] = ()
    # The pre-flight compares the shared fields across nodes before training (islab.preflight), naming a
    # mismatch field by field: then a node's command line may give them (every node types one command).
    nodes_compared: bool = False


def resolve(inputs: Inputs, edge: Edge | None = None) -> ResolvedSpec:
    """Run every step; SpecError with human messages when one refuses."""
    edge = edge or DiskEdge()
    path = inputs.cluster_file
    file = cluster_layer(edge.read_cluster_file(path), path) if path is not None else Layer(Source.FILE)
    allocated = allocation_layers(inputs.allocations, (file, inputs.env, inputs.cli))
    # --resume RUN_DIR alone continues with the run's stored spec, below everything given now.
    run_dir, stored = edge.resumed_run(resume_value((inputs.cli, inputs.env, file)))
    given = merge((inputs.cli, *allocated, inputs.env, file, resumed_layer(stored)))

    # a cluster file's num_envs: auto leaves before the presets hand num_envs to an entry point
    unmeasured, num_envs_auto = take_file_auto(given)
    merged = apply_presets(unmeasured, edge)
    announce_task_module(merged, edge)
    merged = derive(merged, edge.task_default_envs)
    spec = validate(merged, edge.task_ids())

    checks = (
        lambda: resumed_issue(spec, stored, merged.origins, run_dir),
        lambda: disk_issue(spec, edge, merged.origins),
        # Under a scheduler allocation every node gets the same command line: its options are shared;
        # with the pre-flight on, the nodes compare them before training.
        lambda: (
            None
            if any(allocated) or inputs.nodes_compared
            else node_agreement_issue(spec, file, given, edge.task_default_envs)
        ),
    )
    for check in checks:  # in order, the first refusal only (later checks may assume earlier ones)
        issue = check()
        if issue is not None:
            raise SpecError(issue)
    if spec.entrypoint is None:  # our worker: the planner's budget counts the agent config's rollout
        spec = spec.with_rollout_length(edge.rollout_length(spec.lib, spec.task, spec.overrides))
    used = set(merged.sources.values())
    # the job of the allocation that placed this node (the last reader's when two did: Kubernetes over SLURM)
    job = next((found.job for found in reversed(inputs.allocations) if found.source in used and found.job), None)
    return ResolvedSpec(spec, merged.sources, merged.origins, str(path) if path is not None else None, job,
                        num_envs_auto=num_envs_auto)  # fmt: skip


def announce_task_module(merged: Merged, edge: Edge) -> None:
    """Add the tasks of ``--task-module`` to the registry (read statically; the ranks import it)."""
    module = merged.get("task_module")
    if not isinstance(module, str) or not MODULE_PATTERN.fullmatch(module):
        return  # RunSpec reports a malformed name
    try:
        edge.add_task_module(module)
    except TaskRegistrationError as exc:
        raise SpecError(
            Issue(label_of("task_module", merged.origins), str(exc), "Check the module name and its gym.register calls")
        ) from None
