"""The steps between merged layers and a checked spec, each a function of immutable values.

:func:`apply_presets`  ``--mjlab`` / ``--isaaclab`` rewrite the training options into their entry
                       point's arguments; options only our worker knows are refused for a user's
                       entry point (:mod:`islab.resolve.presets`)
:func:`derive`         values that follow from others: the task's default environment count
:func:`validate`       the schema (:class:`~islab.spec.run_spec.RunSpec`), once, against the
                       installed tasks' ids; its errors named with the field as the user gave it
:func:`resumed_issue`  a resume may not change what the checkpoint's state is shaped by
:func:`disk_issue`     what the installed packages and files must hold: the task's extra, wandb,
                       an agent config that takes the overrides, a checkpoint to resume from

Each takes what it reads as arguments -- the machine through an :class:`~islab.resolve.edge.Edge`
-- and returns a new value or an :class:`~islab.spec.issues.Issue`; none changes its input.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from islab import rundir
from islab.libs.registry import LIBRARIES
from islab.resolve.edge import Edge
from islab.resolve.isaaclab_resume import apply_isaaclab_resume
from islab.resolve.layers import Merged, Source, unflatten
from islab.resolve.messages import issue_from_pydantic, label_of
from islab.resolve.presets import apply_isaaclab, apply_mjlab, refuse_worker_only
from islab.resolve.resumed import frozen_field_issue
from islab.spec.fields import DEFAULT_TASK, NUM_ENVS_AUTO
from islab.spec.issues import Issue, SpecError, install_extra_hint
from islab.spec.run_spec import TASK_IDS, RunSpec


def apply_presets(merged: Merged, edge: Edge) -> Merged:
    """The presets and entry-point rules, on a copy: a new :class:`Merged` (SpecError when refused)."""
    values, sources, origins = merged.editable()
    if values.get("mjlab"):
        apply_mjlab(values, sources, origins)
    if values.get("isaaclab") is not None and sources.get("entrypoint") == Source.RESUMED:
        apply_isaaclab_resume(values, sources, origins, edge=edge)  # its stored command, from a checkpoint
    elif values.get("isaaclab") is not None:
        apply_isaaclab(values, sources, origins, preset=edge.isaaclab)
    if values.get("entrypoint") is not None:
        refuse_worker_only(values, origins)
    return Merged(values, sources, origins)


def take_file_auto(merged: Merged) -> tuple[Merged, bool]:
    """A cluster file's ``num_envs: auto`` (no higher layer gave a number) taken out of the merged
    values, so the task's default stands in until ``fit``'s recommendation replaces it after
    resolution (:mod:`islab.fit.auto`); and whether it was there."""
    if merged.sources.get("num_envs") != Source.FILE or merged.get("num_envs") != NUM_ENVS_AUTO:
        return merged, False
    kept = {name: value for name, value in merged.values.items() if name != "num_envs"}
    sources = {name: source for name, source in merged.sources.items() if name != "num_envs"}
    origins = {name: origin for name, origin in merged.origins.items() if name != "num_envs"}
    return Merged(kept, sources, origins), True


def derive(merged: Merged, task_default_envs: Any) -> Merged:
    """The default number of environments belongs to the task, so it is filled after merging (and
    after the presets, which hand it to their entry point). ``task_default_envs(task)``: the
    registered task's count, None for a task the registry does not know (the schema says so) or cannot
    read (the disk checks say why); left open, the schema's ``FALLBACK_NUM_ENVS`` stands."""
    if "num_envs" in merged or merged.get("entrypoint"):
        return merged
    count = task_default_envs(merged.get("task", DEFAULT_TASK))
    return merged if count is None else merged.with_changes({"num_envs": count})


def validate(merged: Merged, task_ids: Collection[str] | None = None) -> RunSpec:
    """The schema, once; every error named with the field's origin (``--num-envs``, ``ISLAB_SEED``).
    ``task_ids``: the installed tasks (the edge's :meth:`~islab.resolve.edge.Edge.task_ids`), which
    ``task`` must be one of; None leaves the id unchecked."""
    try:
        return RunSpec.model_validate(unflatten(merged.values), context={TASK_IDS: task_ids})
    except ValidationError as exc:
        raise SpecError([issue_from_pydantic(err, merged.origins) for err in exc.errors()]) from None


def resumed_issue(
    spec: RunSpec, stored: Mapping[str, tuple[Any, str]], origins: Mapping[str, str], run_dir: Path | None
) -> Issue | None:
    """A resume that would change a field the checkpoint is shaped by (lib, task, num_envs, ...)."""
    return frozen_field_issue(spec, stored, origins, run_dir) if run_dir is not None else None


def disk_issue(spec: RunSpec, edge: Edge, origins: Mapping[str, str]) -> Issue | None:
    """The task's extra and wandb for ``--logger wandb`` must be installed (checked without importing
    them); the agent config must take the overrides and give a rollout length (it turns iterations
    into env steps for the budget the dry run shows); a ``--resume`` path must hold a checkpoint."""
    issue = _disk_issue(spec, edge)
    return None if issue is None else Issue(label_of(issue.field, origins), issue.problem, issue.fix)


def _disk_issue(spec: RunSpec, edge: Edge) -> Issue | None:
    # Only node 0 reads the checkpoint (it broadcasts it), so other nodes need not have it. An entry
    # point's own checkpoint was found when its preset was applied (islab.resolve.isaaclab_resume).
    resumes_worker = spec.resume is not None and spec.entrypoint is None
    if resumes_worker and spec.node_rank in (None, 0) and not edge.checkpoint_exists(spec.resume):
        return Issue(
            "resume",
            f"{str(Path(spec.resume))!r} is neither {rundir.RESUME_FORMS}",
            f"Pass the run directory printed at the end of a run, or one of its {rundir.CHECKPOINTS_DIR}/*.pt files",
        )
    extra = edge.missing_extra(spec.task)
    if extra is not None:
        return Issue("task", f"{spec.task} needs the [{extra}] extra, which is not installed (no module {extra!r})",
                     install_extra_hint(extra))  # fmt: skip
    if spec.logger == "wandb" and not edge.module_installed("wandb"):
        return Issue("logger", "wandb needs the [wandb] extra, which is not installed (no module 'wandb')",
                     f"{install_extra_hint('wandb')}, or use --logger tensorboard")  # fmt: skip
    if spec.video_interval and not edge.module_installed("imageio_ffmpeg"):
        return Issue("video_interval", "recording videos needs the [video] extra, which is not installed (no module "
                     "'imageio_ffmpeg')", f"{install_extra_hint('video')}, or leave out --video-interval")  # fmt: skip
    task_problem = edge.task_problem(spec.task)
    if task_problem is not None:
        return Issue("task", *task_problem)
    configured = list(edge.configured_libraries(spec.task))
    if spec.lib not in configured:
        return Issue(
            "lib",
            f"task {spec.task} has no {spec.lib} agent config (it has: {', '.join(configured) or 'none'})",
            (f"Choose --lib {configured[0]}, or" if configured else "To train it with this library,")
            + f" register {LIBRARIES[spec.lib].cfg_entry_point_key} in the task's gym.register kwargs "
            f"with a YAML in {spec.lib}'s format",
        )
    error = edge.rollout_problem(spec.lib, spec.task, spec.overrides)
    if error is not None:
        return Issue(error.field, error.message, f"The keys are those of {edge.agent_config_path(spec.lib, spec.task)}")
    return None
