"""Reading SWEEP.yaml and checking it against the disk and the machine, before anything starts.

Three kinds of mistakes are caught here, each as ``error: <file>: <field>: <problem>. <fix>.``
(exit 2, nothing started):

* the file's shape (:class:`islab.sweep.schema.SweepSpec`: unknown keys, types, bad bounds);
* the base run and every configuration, resolved exactly as islab-train resolves its command line
  (:func:`islab.resolve.resolve.resolve_spec`): unknown spec fields, and override keys the agent
  config does not have (checked against the library's YAML by :mod:`islab.spec.agent_config`);
* resources: a trial that cannot fit one node (more GPUs or cores than it has, ranks sharing a GPU).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from islab.fit.table import DEFAULT_MEMORY_FRACTION, FitRow, format_bytes, peak_at
from islab.resolve.isaaclab_install import AUTO as ISAACLAB_AUTO
from islab.resolve.resolve import Provided, ResolvedSpec, resolve_spec
from islab.spec.issues import Issue, SpecError, suggest
from islab.spec.run_spec import RunSpec
from islab.sweep.schema import Distribution, SweepSpec
from islab.sweep.trials import (
    TASK_KEY,
    Resources,
    configurations,
    draw,
    flatten_run,
    override_text,
    resources_of,
    run_options,
)

SWEEP_KEYS = tuple(SweepSpec.model_fields)
# Isaac Lab's Hydra overrides: the roots of its config, and Isaac Lab 3's preset selectors
ISAACLAB_HYDRA_ROOTS = ("env.", "agent.")
ISAACLAB_SELECTORS = ("physics", "presets", "renderer")


@dataclass(frozen=True)
class LoadedSweep:
    """A checked sweep: its schema, the resolved base run, and where the file was."""

    spec: SweepSpec
    base: RunSpec
    name: str
    source: str  # the SWEEP.yaml path as given (for messages)
    cluster_file: str | None  # run.cluster, made absolute (the trials run from the sweep's cwd)
    # An entry point (Isaac Lab's train.py, a script): search values go to it as KEY=VALUE arguments
    search_as_args: bool = False
    # Its trainer writes under its working directory (Isaac Lab's, mjlab's train): a cwd per trial
    own_cwd: bool = False

    @property
    def resources(self) -> Resources:
        return resources_of(self.spec, self.base.device, self.base.nproc_per_node)


def read_sweep_file(path: Path) -> dict[str, Any]:
    label = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(
            Issue(label, "the file does not exist", "Check the path (configs/sweeps/ has examples)")
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(Issue(label, f"cannot read the file ({exc})", "Check the path and its permissions")) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(Issue(label, f"malformed YAML{where}", "Fix the YAML syntax there")) from None
    if not isinstance(data, dict):
        raise SpecError(Issue(label, "a sweep file is a mapping", "Start from configs/sweeps/cartpole-lr.yaml"))
    return data


def parse_sweep(data: Mapping[str, Any], label: str) -> SweepSpec:
    try:
        return SweepSpec.model_validate(dict(data))
    except ValidationError as exc:
        errors = exc.errors()
        # A search value is a list or a distribution: when it is a distribution with a problem of
        # its own, the "not a list" error of the other branch only adds noise.
        ruled = {
            tuple(err["loc"][:2]) for err in errors if err["type"] == "spec_rule" and err["loc"][:1] == ("search",)
        }
        errors = [err for err in errors if err["type"] == "spec_rule" or tuple(err["loc"][:2]) not in ruled]
        issues = list(dict.fromkeys(_issue(err, label) for err in errors))
        raise SpecError(issues) from None


def _issue(err: Mapping[str, Any], label: str) -> Issue:
    loc = [str(part) for part in err["loc"] if not str(part).startswith(("list[", "tuple[", "function-", "Annotated"))]
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "spec_rule":
        where = ".".join(loc[:2]) if loc[:1] == ["search"] else ctx["field"]
        if loc[:1] == ["search"] and ctx["field"] in ("distribution", "uniform", "loguniform", "randint"):
            where = f"search.{loc[1]}"
        return Issue(f"{label}: {where}", ctx["problem"], ctx["fix"])
    dotted = ".".join(loc) or "sweep"
    if kind == "extra_forbidden":
        parent = loc[:-1]
        known = list(SweepSpec.model_fields) if not parent else _fields_under(parent)
        hint = suggest(loc[-1], known)
        return Issue(f"{label}: {dotted}", "unknown key", f"{hint + ' ' if hint else ''}Valid keys: {', '.join(known)}")
    return Issue(f"{label}: {dotted}", str(err.get("msg", "invalid value")), "See docs/SWEEPS.md for the format")


def _fields_under(parent: list[str]) -> list[str]:
    model: Any = SweepSpec
    for part in parent:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:  # search.<key>: a distribution
            return list(Distribution.model_fields)
        model = field.annotation
    return list(getattr(model, "model_fields", {}))


def load_sweep(
    path: Path, *, name: str | None = None, cluster_file: str | None = None, workdir: str | None = None
) -> LoadedSweep:
    """SWEEP.yaml -> a checked sweep, or :class:`SpecError` (the command prints it and exits 2).
    ``run.cluster`` is relative to the file (``cluster_file``: already resolved, for --resume);
    ``run.isaaclab`` and ``run.python`` to ``workdir`` (default: here), where the sweep started."""
    label = path.name
    spec = parse_sweep(read_sweep_file(path), label)
    spec = spec.model_copy(update={"run": absolute_paths(spec.run, workdir or os.getcwd())})
    cluster = spec.run.get("cluster")
    if cluster is not None and cluster_file is None:
        cluster_file = str((path.parent / str(cluster)).absolute())
    first = configurations_to_check(spec)[0]
    # What runs decides what a search key is: the run alone (its task, when the search chooses it)
    plain = resolve_trial(spec, label, cluster_file, {key: first[key] for key in first if key == TASK_KEY}).spec
    as_args = plain.entrypoint is not None
    search_problem = entry_search_issue(spec, plain, label)
    if search_problem is not None:
        raise SpecError(search_problem)
    base = resolve_trial(spec, label, cluster_file, first, as_args=as_args).spec
    if base.nnodes > 1:
        raise SpecError(
            Issue(
                f"{label}: run.nnodes",
                f"the base run spans {base.nnodes} nodes",
                "A trial is a one-node job (nproc_per_node ranks); Ray places trials on nodes",
            )
        )
    for config in configurations_to_check(spec)[1:]:
        resolve_trial(spec, label, cluster_file, config, as_args=as_args)
    return LoadedSweep(
        spec=spec, base=base, name=name or spec.name or path.stem, source=str(path), cluster_file=cluster_file,
        search_as_args=as_args, own_cwd=plain.isaaclab is not None or plain.mjlab,
    )  # fmt: skip


def absolute_paths(run: Mapping[str, Any], workdir: str) -> dict[str, Any]:
    """``run`` with its directory and interpreter paths made absolute against ``workdir``: a trial may
    run in a working directory of its own (:attr:`islab.sweep.trials.Trial.cwd`)."""
    fixed = dict(run)
    isaaclab = fixed.get("isaaclab")
    if isinstance(isaaclab, str) and isaaclab != ISAACLAB_AUTO:  # auto: the ranks' installed Isaac Lab, no directory
        fixed["isaaclab"] = os.path.join(workdir, os.path.expanduser(isaaclab))
    python = fixed.get("python")
    if isinstance(python, str) and os.sep in python:
        fixed["python"] = os.path.join(workdir, os.path.expanduser(python))
    return fixed


def entry_search_issue(spec: SweepSpec, plain: RunSpec, label: str) -> Issue | None:
    """A search key the run's entry point cannot take. Isaac Lab's train.py reads every
    ``KEY=VALUE`` after its own options as a Hydra override of its ``env`` or ``agent`` config (and,
    in Isaac Lab 3, ``physics=``/``presets=``/``renderer=`` select presets); mjlab's train reads
    ``--agent.*`` flags, not overrides."""
    keys = [key for key in spec.search if key != TASK_KEY]
    if plain.mjlab and keys:
        return Issue(
            f"{label}: search.{keys[0]}",
            "mjlab's train takes no KEY=VALUE overrides (its options are --agent.* / --env.* flags)",
            f"Search {TASK_KEY} only, or train the mjlab task with islab's worker (run: {{task: <mjlab id>}})",
        )
    if plain.isaaclab is None:
        return None
    for key in keys:
        if not key.startswith(ISAACLAB_HYDRA_ROOTS) and key not in ISAACLAB_SELECTORS:
            return Issue(
                f"{label}: search.{key}",
                "is not a Hydra key of Isaac Lab's train.py, which overrides env.* and agent.* (and in "
                f"Isaac Lab 3 selects {', '.join(ISAACLAB_SELECTORS)})",
                f"Write e.g. agent.algorithm.learning_rate, or {TASK_KEY} to search over tasks",
            )
    return None


def configurations_to_check(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every planned configuration; for Optuna, which chooses while it runs, one per search value
    kind (a list's every value, a distribution's bounds), so each key is checked once."""
    if spec.searcher != "optuna":
        return configurations(spec) or [{}]
    rng = random.Random(spec.search_seed)
    return [{key: draw(space, rng) for key, space in spec.search.items()} for _ in range(1)] + [
        {key: value} for key, space in spec.search.items() if isinstance(space, list) for value in space
    ]


def resolve_trial(
    spec: SweepSpec, label: str, cluster_file: str | None, config: Mapping[str, Any], *, as_args: bool = False
) -> ResolvedSpec:
    """One trial's spec, resolved as islab-train resolves its command line: the same checks, the
    same messages, each naming where in SWEEP.yaml the value came from. ``as_args``: the search's
    values are the entry point's ``KEY=VALUE`` arguments (:func:`islab.sweep.trials.trial_argv`)."""
    layer: dict[str, Provided] = {}
    for key, value in flatten_run(spec.run).items():
        if key == "cluster":
            continue
        if key.startswith("entrypoint."):
            layer["entrypoint"] = Provided({key.split(".", 1)[1]: value}, f"{label}: run.entrypoint")
            continue
        if key in ("overrides", "args") and isinstance(value, list):
            value = tuple(value)
        layer[key] = Provided(value, f"{label}: run.{key}")
    if TASK_KEY in config:
        layer["task"] = Provided(config[TASK_KEY], f"{label}: search.{TASK_KEY}")
    chosen = [override_text(key, value) for key, value in config.items() if key != TASK_KEY]
    overrides = [str(item) for item in spec.run.get("overrides") or ()]
    if as_args and chosen:
        layer["args"] = Provided((*(str(arg) for arg in spec.run.get("args") or ()), *chosen), f"{label}: search")
    elif not as_args:
        overrides += chosen
    if overrides:
        origin = f"{label}: search" if chosen and not as_args else f"{label}: run.overrides"
        layer["overrides"] = Provided(tuple(overrides), origin)
    layer["seed"] = Provided(spec.seed_list[0], f"{label}: seeds")
    try:
        resolved = resolve_spec(layer, None, Path(cluster_file) if cluster_file else None)
        run_options(spec.run, cluster_file)
    except SpecError as exc:
        raise SpecError([_sweep_issue(issue, label, spec) for issue in exc.issues]) from None
    except KeyError as exc:  # a spec field without a command-line option: it cannot be a trial's argument
        raise SpecError(
            Issue(
                f"{label}: run.{exc.args[0]}",
                "has no islab-train option, so a trial command cannot set it",
                "Put it in a cluster file and give run: {cluster: FILE}",
            )
        ) from None
    return resolved


def _sweep_issue(issue: Issue, label: str, spec: SweepSpec) -> Issue:
    """A message from the run's resolution, named after SWEEP.yaml (an override's error names its search key)."""
    if issue.field.startswith(label):
        return issue
    if issue.field.startswith("override '"):
        key = issue.field.split("'")[1].split("=")[0]
        where = f"search.{key}" if key in spec.search else "run.overrides"
        return Issue(f"{label}: {where}", issue.problem, issue.fix)
    return Issue(f"{label}: run ({issue.field})", issue.problem, issue.fix)


def packing_issue(num_envs: int, trials_per_gpu: float, measured: tuple[Sequence[FitRow], int] | None) -> Issue | None:
    """GPU trials packed ``trials_per_gpu`` to a GPU against the memory ``islab-train fit`` measured for
    this job shape (``measured``: its rows and the GPU's memory, :func:`islab.fit.cache.measured`):
    the packed trials' peaks together must stay within ``fit``'s memory fraction of the GPU. None
    when they do, when one trial has a GPU to itself, or when nothing was measured."""
    if measured is None or trials_per_gpu <= 1:
        return None
    rows, memory_bytes = measured
    peak = peak_at(rows, num_envs)
    if peak is None or peak <= 0:
        return None
    packed = math.ceil(trials_per_gpu)
    budget = DEFAULT_MEMORY_FRACTION * memory_bytes
    if packed * peak <= budget:
        return None
    most = max(1, int(budget // peak))
    return Issue(
        "trials_per_gpu",
        f"{packed} trials of {num_envs} envs would share one GPU: islab-train fit measured ~{format_bytes(peak)} "
        f"each, {format_bytes(packed * peak)} together, over {DEFAULT_MEMORY_FRACTION:g} of the GPU's "
        f"{format_bytes(memory_bytes)}",
        f"Use trials_per_gpu: {most}, or fewer envs per trial (run.num_envs)",
    )


def fit_issues(
    resources: Resources, *, nproc_per_node: int, device: str, cpus: float, gpus: float, where: str
) -> list[Issue]:
    """Why one trial cannot run on a node with ``cpus`` cores and ``gpus`` GPUs (empty: it fits)."""
    issues = []
    if device == "cuda":
        if resources.gpu > 1 and not float(resources.gpu).is_integer():
            issues.append(
                Issue(
                    "trials_per_gpu",
                    f"a trial would get {resources.gpu:g} GPUs (nproc_per_node "
                    f"{nproc_per_node} / trials_per_gpu); above one GPU a trial needs whole GPUs",
                    "Choose trials_per_gpu so that nproc_per_node / trials_per_gpu is a whole number",
                )
            )
        if nproc_per_node > 1 and resources.gpu < nproc_per_node:
            issues.append(
                Issue(
                    "trials_per_gpu",
                    f"the {nproc_per_node} ranks of a trial would share "
                    f"{resources.gpu:g} GPU(s); NCCL needs a GPU per rank",
                    "Use trials_per_gpu: 1 (or fewer) for multi-rank trials, or nproc_per_node: 1",
                )
            )
        if resources.gpu > gpus:
            issues.append(
                Issue(
                    "trials_per_gpu",
                    f"a trial needs {resources.gpu:g} GPU(s) (nproc_per_node "
                    f"{nproc_per_node} / trials_per_gpu), but {where} has {gpus:g}",
                    "Raise trials_per_gpu, lower nproc_per_node, or run on a node with more GPUs",
                )
            )
    if resources.cpu > cpus:
        issues.append(
            Issue(
                "cpus_per_trial" if device == "cpu" else "run.nproc_per_node",
                f"a trial needs {resources.cpu:g} CPU core(s), but {where} has {cpus:g}",
                "Lower cpus_per_trial (or nproc_per_node)",
            )
        )
    return issues
