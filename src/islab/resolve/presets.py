"""Presets and entry points in the spec's layers: ``--isaaclab DIR`` and ``--mjlab`` turn the
training options into Isaac Lab's / mjlab's own train-script arguments (the entry point and its
``args``), and the options only our worker understands are refused for a user's entry point.
Each function works on the merged layers of :func:`islab.resolve.resolve.resolve_spec`
(``merged`` values, their ``sources`` and human ``origins``, copies the preset step of
:mod:`islab.resolve.steps` hands them) before the spec is validated."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from islab.resolve.isaaclab import PresetEntry, combination_problem
from islab.resolve.isaaclab3 import IsaacLab3, isaaclab3_entry
from islab.spec.issues import Issue, SpecError
from islab.spec.run_spec import WORKER_ONLY_FIELDS, RunSpec

DEFAULT_PYTHON = RunSpec.model_fields["python"].default  # the ranks' interpreter unless --python names one


def _preset_issue(field: str, text: str) -> Issue:
    problem, _, fix = text.partition(". ")
    return Issue(field, problem, fix or "See islab-train --help")


def apply_isaaclab(merged: dict[str, Any], sources: dict[str, Any], origins: dict[str, str], *, preset: Any) -> None:
    """``--isaaclab auto|DIR``: the entry point becomes Isaac Lab's trainer. Isaac Lab 3 (``auto``: the
    one installed in the ranks' Python; or a 3.x checkout): what ``isaaclab train_multigpu`` runs per
    rank (:mod:`islab.resolve.isaaclab3`). A 2.x checkout: its ``<lib>/train.py``
    (:mod:`islab.resolve.isaaclab`), --task/--num-envs/--seed/--max-iterations as its flags plus
    --headless --distributed. The user's ``--`` arguments follow. ``preset``: what reads Isaac Lab's
    files and interpreter (the resolution edge passes it in)."""
    label = origins.get("isaaclab", "isaaclab")
    if merged.get("entrypoint") is not None:
        raise SpecError(Issue(label, "already names the entry point (Isaac Lab's train.py)",
                              f"Drop {origins.get('entrypoint', 'entrypoint')} or the preset"))  # fmt: skip
    directory, lib = str(merged["isaaclab"]), str(merged.get("lib", "rsl_rl"))
    framework = str(merged.get("ml_framework", "torch"))
    try:
        install = preset.locate(directory, str(merged.get("python", DEFAULT_PYTHON)), merged.get("env") or {})
    except ValueError as problem:
        raise SpecError(_preset_issue(label, str(problem))) from None
    if install is not None:
        _apply_isaaclab3(install, merged, sources, origins, preset=preset)
        return
    problem = preset.preset_problem(directory, lib, framework)
    if problem:
        raise SpecError(_preset_issue(label, problem))
    task = _preset_task(merged, origins, lambda task: preset.unknown_task_problem(task, directory), "Isaac-Cartpole-v0")
    cpu = merged.get("device") == "cpu"
    _refuse_cpu_ranks(merged, origins, "Isaac Lab's train.py")
    entry = preset.isaaclab_entry(
        directory, lib, framework, task=task, num_envs=merged.pop("num_envs", None),
        seed=merged.get("seed"), max_iterations=merged.pop("max_iterations", None),
        # AppLauncher defaults to cuda:0: a CPU rank must say so, and run without --distributed, which
        # would move it to cuda:0 (the user's flags after -- come last and win)
        extra_args=(*(["--device", "cpu"] if cpu else []), *(merged.get("args") or ())), distributed=not cpu,
    )  # fmt: skip
    _set_entry(entry, merged, sources, origins)


def _apply_isaaclab3(
    install: IsaacLab3, merged: dict[str, Any], sources: dict[str, Any], origins: dict[str, str], *, preset: Any
) -> None:
    """Isaac Lab 3: each rank runs its ``isaaclab_rl/entrypoints/multigpu.py``; the trailing KEY=VALUE
    arguments are its Hydra overrides (``presets=``, ``physics=``, ``env.…``, ``agent.…``)."""
    label = origins.get("isaaclab", "isaaclab")
    lib, framework = str(merged.get("lib", "rsl_rl")), str(merged.get("ml_framework", "torch"))
    problem = combination_problem(lib, framework) or preset.entry3_problem(install)
    if problem:
        raise SpecError(_preset_issue(label, problem))
    task = _preset_task(merged, origins, lambda task: preset.unknown_task3_problem(task, install), "Isaac-Cartpole")
    cpu = merged.get("device") == "cpu"
    _refuse_cpu_ranks(merged, origins, "Isaac Lab's trainer")
    entry = isaaclab3_entry(
        install, lib, framework, task=task, num_envs=merged.pop("num_envs", None), seed=merged.get("seed"),
        max_iterations=merged.pop("max_iterations", None), overrides=tuple(merged.pop("overrides", None) or ()),
        extra_args=tuple(merged.get("args") or ()), cpu=cpu,
    )  # fmt: skip
    _set_entry(entry, merged, sources, origins)


def _preset_task(
    merged: dict[str, Any], origins: Mapping[str, str], unknown_problem: Callable[[str], str | None], example: str
) -> str:
    """The task id the preset hands Isaac Lab (taken out of the spec: our worker's field), checked."""
    task = merged.pop("task", None)
    if task is None:
        raise SpecError(Issue("task", "--isaaclab needs an Isaac Lab task id", f"Add e.g. --task {example}"))
    problem = unknown_problem(str(task))
    if problem:
        raise SpecError(_preset_issue(origins.get("task", "task"), problem))
    return str(task)


def _set_entry(entry: PresetEntry, merged: dict[str, Any], sources: dict[str, Any], origins: dict[str, str]) -> None:
    """The preset's entry point and arguments, from where ``isaaclab`` came from."""
    merged["entrypoint"], merged["args"] = {"script": str(entry.script)}, entry.args
    for name in ("entrypoint", "args"):
        sources[name], origins[name] = sources["isaaclab"], origins.get("isaaclab", "isaaclab")


def _refuse_cpu_ranks(merged: Mapping[str, Any], origins: Mapping[str, str], trainer: str) -> None:
    """Several CPU ranks need --distributed, which Isaac Lab turns into cuda:<local rank>."""
    if merged.get("device") == "cpu" and _several_ranks(merged):
        raise SpecError(Issue(
            origins.get("device", "device"),
            f"{trainer} cannot train on several CPU ranks: with --distributed (which several ranks "
            "need) it puts the simulation and the agent on cuda:<local rank>, whatever --device says",
            "Use --gpus N for several ranks, or one CPU rank (--device cpu --nproc 1 --nnodes 1)",
        ))  # fmt: skip


def _several_ranks(merged: Mapping[str, Any]) -> bool:
    nnodes, nproc = merged.get("nnodes", 1), merged.get("nproc_per_node", 1)
    return str(nnodes).strip() != "1" or str(nproc).strip() != "1"


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
    # --hang-timeout watches an entry point too, through its TensorBoard events (islab.run.event_hangs);
    # Isaac Lab's trainer resumes through its own options (islab.resolve.isaaclab_resume)
    also = ("hang_timeout_s", "resume") if merged.get("isaaclab") is not None else ("hang_timeout_s",)
    given = [name for name in WORKER_ONLY_FIELDS if merged.get(name) not in (None, (), []) and name not in also]
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
