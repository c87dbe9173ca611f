"""Presets and entry points in the spec's layers: ``--isaaclab DIR`` and ``--mjlab`` turn the
training options into Isaac Lab's / mjlab's own train-script arguments (the entry point and its
``args``), and the options only our worker understands are refused for a user's entry point.
Each function works on the merged layers of :func:`islab.resolve.resolve.resolve_spec`
(``merged`` values, their ``sources`` and human ``origins``, copies the preset step of
:mod:`islab.resolve.steps` hands them) before the spec is validated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from islab.resolve import isaaclab as isaaclab_preset
from islab.spec.issues import Issue, SpecError
from islab.spec.run_spec import WORKER_ONLY_FIELDS


def _preset_issue(field: str, text: str) -> Issue:
    problem, _, fix = text.partition(". ")
    return Issue(field, problem, fix or "See islab-train --help")


def apply_isaaclab(
    merged: dict[str, Any], sources: dict[str, Any], origins: dict[str, str], *, preset: Any = isaaclab_preset
) -> None:
    """``--isaaclab DIR``: the entry point becomes Isaac Lab's ``<lib>/train.py`` (see
    :mod:`islab.resolve.isaaclab`), the preset mapping --task/--num-envs/--seed/--max-iterations to
    its flags and adding --headless --distributed; the user's ``--`` arguments follow. ``preset``:
    what reads Isaac Lab's directory (the resolution edge passes it in)."""
    label = origins.get("isaaclab", "isaaclab")
    if merged.get("entrypoint") is not None:
        raise SpecError(Issue(label, "already names the entry point (Isaac Lab's train.py)",
                              f"Drop {origins.get('entrypoint', 'entrypoint')} or the preset"))  # fmt: skip
    directory, lib = str(merged["isaaclab"]), str(merged.get("lib", "rsl_rl"))
    framework = str(merged.get("ml_framework", "torch"))
    problem = preset.preset_problem(directory, lib, framework)
    if problem:
        raise SpecError(_preset_issue(label, problem))
    task = merged.pop("task", None)
    if task is None:
        raise SpecError(Issue("task", "--isaaclab needs an Isaac Lab task id", "Add e.g. --task Isaac-Cartpole-v0"))
    problem = preset.unknown_task_problem(str(task), directory)
    if problem:
        raise SpecError(_preset_issue(origins.get("task", "task"), problem))
    entry = preset.isaaclab_entry(
        directory, lib, framework, task=str(task), num_envs=merged.pop("num_envs", None),
        seed=merged.get("seed"), max_iterations=merged.pop("max_iterations", None),
        # AppLauncher defaults to cuda:0: CPU ranks must say so (the user's flags after -- come last and win)
        extra_args=(*(["--device", "cpu"] if merged.get("device") == "cpu" else []), *(merged.get("args") or ())),
    )  # fmt: skip
    merged["entrypoint"], merged["args"] = {"script": str(entry.script)}, entry.args
    for name in ("entrypoint", "args"):
        sources[name], origins[name] = sources["isaaclab"], label


def apply_mjlab(merged: dict[str, Any], sources: dict[str, Any], origins: dict[str, str]) -> None:
    """``--mjlab``: mjlab's own ``train`` console script (mjlab 1.6). It spawns its ranks itself
    (torchrunx, from ``--gpu-ids``), so islab-train starts ONE process on one node: ``--gpus N`` ->
    ``--gpu-ids [0,...,N-1]`` (indices into CUDA_VISIBLE_DEVICES), ``--device cpu`` -> ``--gpu-ids None``
    (one process: mjlab's rsl_rl joins NCCL only). --num-envs/--max-iterations/--seed map to
    ``--env.scene.num-envs``/``--agent.max-iterations``/``--agent.seed``; TensorBoard unless chosen."""
    label = origins.get("mjlab", "mjlab")
    if merged.get("entrypoint") is not None or merged.get("isaaclab") is not None:
        raise SpecError(Issue(label, "already names the entry point (mjlab's train)", "Use one preset or entry point"))
    if int(merged.get("nnodes", 1) if str(merged.get("nnodes", 1)).isdigit() else 2) > 1:
        fix = "For several nodes train the mjlab task with islab's worker (--task <mjlab id>)"
        raise SpecError(Issue(label, "mjlab's train spawns its ranks on one node only", fix))
    task = merged.pop("task", None)
    if task is None:
        raise SpecError(Issue("task", "--mjlab needs an mjlab task id", "Add e.g. --task Mjlab-Cartpole-Balance"))
    nproc = int(merged.get("nproc_per_node", 1))
    gpu_ids = "None" if merged.get("device") == "cpu" else "[" + ",".join(str(i) for i in range(nproc)) + "]"
    user = list(merged.get("args") or ())
    args = [str(task), "--gpu-ids", gpu_ids]
    for name, flag in (("num_envs", "--env.scene.num-envs"), ("max_iterations", "--agent.max-iterations")):
        value = merged.pop(name, None)
        if value is not None:
            args += [flag, str(value)]
    if merged.get("seed") is not None:
        args += ["--agent.seed", str(merged["seed"])]
    if not any(arg.startswith("--agent.logger") for arg in user):
        args += ["--agent.logger", "tensorboard"]
    merged["entrypoint"], merged["args"], merged["nproc_per_node"] = {"command": "train"}, (*args, *user), 1
    for name in ("entrypoint", "args"):
        sources[name], origins[name] = sources["mjlab"], label


def refuse_worker_only(merged: Mapping[str, Any], origins: Mapping[str, str]) -> None:
    """Options only our worker understands mean nothing to a script of the user's: refuse them
    rather than drop them silently (the script's own flags go after ``--``)."""
    given = [name for name in WORKER_ONLY_FIELDS if merged.get(name) not in (None, (), [])]
    if given:
        labels = ", ".join(origins.get(name, name) for name in given)
        raise SpecError(
            Issue(
                origins.get(given[0], given[0]),
                f"{labels} {'applies' if len(given) == 1 else 'apply'} only to islab's own worker, "
                "not to your entry point",
                "Drop them and pass your script's own flags after --, e.g. -- --num_envs 64",
            )
        )
