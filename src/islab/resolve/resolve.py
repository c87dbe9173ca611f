"""Where each setting comes from: layers, files and precedence, then the schema, then the disk.

A launch is described by up to five *layers* of settings, highest precedence first:

1. the command line (``--num-envs 64``),
2. inside a SLURM allocation (``--slurm`` or under ``srun``): the allocation's node count, node
   rank and rendezvous address (:mod:`islab.resolve.slurm`),
3. ``ISLAB_*`` environment variables (``ISLAB_NUM_ENVS=64``),
4. a YAML cluster file (``--cluster two-node.yaml``), shared by every node of a cluster,
5. built-in defaults (the schema's, :mod:`islab.spec.run_spec`).

:func:`resolve_spec` merges them field by field (a command-line ``--master-port`` overrides the
file's ``rendezvous.master_port`` but keeps its ``master_addr``), validates the result once with
the schema, then checks what needs the disk -- the agent-config overrides against the library's
YAML (and that it yields a rollout length for the budget), and that a ``--resume`` path holds a
checkpoint -- and returns a :class:`ResolvedSpec`: the frozen :class:`RunSpec` plus, for every
field, the layer it came from. Every way it can fail is a :class:`SpecError` whose messages name
the field as the user gave it (``--num-envs``, ``ISLAB_SEED``, ``cpu.yaml: nnodes``).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from islab.libs.registry import LIBRARIES
from islab.resolve.presets import apply_isaaclab, apply_mjlab, refuse_worker_only
from islab.resolve.resumed import frozen_field_issue, run_dir_of, stored_layer
from islab.spec.agent_config import AgentConfigError, load_agent_config
from islab.spec.budget import rollout_length
from islab.spec.issues import Issue, SpecError, suggest
from islab.spec.launch_rules import shared_fields
from islab.spec.run_spec import (
    CHOICES,
    DEFAULT_TASK,
    FIELDS,
    INPUT_FIELDS,
    MODULE_PATTERN,
    Rendezvous,
    RunSpec,
    parse_node_range,
)
from islab.spec.worker_args import default_of
from islab.tasks import (
    TASKS,
    TaskRegistrationError,
    add_task_module,
    agent_config_path,
    libraries_with_agent_config,
    missing_extra,
)


class Source(str, Enum):
    """Which layer a resolved value came from."""

    CLI = "cli"
    SLURM = "slurm"
    ENV = "env"
    FILE = "file"
    RESUMED = "resumed"  # the stored spec of the run being resumed (islab.resolve.resumed)
    DEFAULT = "default"


@dataclass(frozen=True)
class Provided:
    """A value from one layer and the words that name where it came from (for messages)."""

    value: Any
    origin: str  # e.g. "--gpus", "ISLAB_NUM_ENVS", "two-node.yaml: rendezvous.master_port"


@dataclass(frozen=True)
class ResolvedSpec:
    """The validated spec plus, per dotted field name, which layer supplied it."""

    spec: RunSpec
    sources: Mapping[str, Source] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)
    cluster_file: str | None = None

    def explain(self) -> list[tuple[str, Any, Source]]:
        """(field, value, source) for every field, in schema order; secrets masked."""
        plain = self.spec.to_plain()
        rows = []
        for name in FIELDS:
            section, _, key = name.rpartition(".")
            value = plain[section][key] if section else plain[key]
            rows.append((name, value, self.sources.get(name, Source.DEFAULT)))
        return rows


def load_cluster_file(path: Path) -> dict[str, Provided]:
    """Read a YAML cluster spec into a flat layer keyed by dotted field names.

    Only reading and shape checks happen here; types and unknown keys are left to the schema so
    that all of those messages come from one place.
    """
    import yaml  # lazy: only paid when a cluster file is given

    label = f"--cluster {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            Issue(label, "the file does not exist", "Check the path (configs/cluster/ has examples)")
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(
            Issue(label, f"cannot read the file ({reason})", "Check the path and its permissions")
        ) from None
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
            Issue(
                label,
                f"the file is {kind}",
                "A cluster file is a mapping of keys such as lib: rsl_rl, nnodes: 2",
            )
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
    layer: dict[str, Provided] = {}
    for key, value in data.items():
        if key == "rendezvous" and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                dotted = f"rendezvous.{sub_key}"
                layer[dotted] = Provided(sub_value, f"{path.name}: {dotted}")
        else:
            layer[str(key)] = Provided(value, f"{path.name}: {key}")
    return layer


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        if dotted.startswith("rendezvous.") and not isinstance(nested.get("rendezvous", {}), dict):
            continue  # `rendezvous: 5` in a file: leave the type error to the schema
        if dotted.startswith("rendezvous."):
            nested.setdefault("rendezvous", {})[dotted.split(".", 1)[1]] = value
        else:
            nested[dotted] = value
    return nested


_RIVALS = {"total_env_steps": "max_iterations", "max_iterations": "total_env_steps"}


def resolve_spec(
    cli: Mapping[str, Provided] | None = None,
    env: Mapping[str, Provided] | None = None,
    cluster_file: Path | None = None,
    slurm: Callable[[Mapping[str, Any]], Mapping[str, Provided]] | None = None,
) -> ResolvedSpec:
    """Merge command line > SLURM allocation > environment > cluster file > defaults, then
    validate once.

    ``cli`` and ``env`` are flat layers keyed by dotted field names (``rendezvous.master_port``);
    absent keys mean "not given". ``slurm``, when running inside a SLURM allocation, builds the
    allocation's layer (nodes, node rank, rendezvous) from the values the other layers chose --
    where the rendezvous goes depends on the launcher and backend (see :mod:`islab.resolve.slurm`).
    Raises :class:`SpecError` with human messages.
    """
    file_layer = load_cluster_file(cluster_file) if cluster_file is not None else {}
    slurm_layer: Mapping[str, Provided] = {}
    if slurm is not None:
        chosen: dict[str, Any] = {}
        for layer in (file_layer, env or {}, cli or {}):
            chosen.update({name: provided.value for name, provided in layer.items()})
        slurm_layer = slurm(chosen)
    # --resume RUN_DIR alone continues with the run's stored spec, below everything given now.
    resume = next((layer["resume"].value for layer in (cli or {}, env or {}, file_layer) if "resume" in layer), None)
    resumed_dir = run_dir_of(resume) if isinstance(resume, str) else None
    stored = stored_layer(resumed_dir) if resumed_dir is not None else {}
    layers = (
        (Source.CLI, cli or {}),
        (Source.SLURM, slurm_layer),
        (Source.ENV, env or {}),
        (Source.FILE, file_layer),
        (Source.RESUMED, {name: Provided(*held) for name, held in stored.items()}),
    )

    merged: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    origins: dict[str, str] = {}
    for source, layer in reversed(layers):  # lowest precedence first, higher ones overwrite
        # The two ways of saying how long to train replace each other across layers, as one value
        # replaces another: --total-env-steps on the command line beats max_iterations in a
        # cluster file. Both in one layer is a contradiction, reported by RunSpec.
        for name, rival in _RIVALS.items():
            if name in layer and rival not in layer:
                for held in (merged, sources, origins):
                    held.pop(rival, None)
        for name, provided in layer.items():
            merged[name] = provided.value
            sources[name] = source
            origins[name] = provided.origin

    given = dict(merged)  # before the presets rewrite task, num_envs, ... into their entry point
    if merged.get("mjlab"):
        apply_mjlab(merged, sources, origins)
    if merged.get("isaaclab") is not None:
        apply_isaaclab(merged, sources, origins)
    if merged.get("entrypoint") is not None:
        refuse_worker_only(merged, origins)
    if merged.get("task_module") is not None:
        _announce_task_module(merged["task_module"], origins)
    # The default number of environments belongs to the task, so it is filled after merging.
    if "num_envs" not in merged and merged.get("task", DEFAULT_TASK) in TASKS and not merged.get("entrypoint"):
        merged["num_envs"] = TASKS[merged.get("task", DEFAULT_TASK)].default_num_envs

    try:
        spec = RunSpec.model_validate(_unflatten(merged))
    except ValidationError as exc:
        raise SpecError([_issue_from_pydantic(err, origins) for err in exc.errors()]) from None
    issue = frozen_field_issue(spec, stored, origins, resumed_dir) if resumed_dir is not None else None
    if issue is not None:
        raise SpecError(issue)
    issue = _disk_issue(spec)
    if issue is not None:
        raise SpecError(Issue(_label(issue.field, origins), issue.problem, issue.fix))
    # Under SLURM, srun gives every node the same command line: its options are shared already.
    issue = None if slurm_layer else _shared_field_issue(spec, file_layer, given, sources, origins)
    if issue is not None:
        raise SpecError(issue)
    return ResolvedSpec(
        spec=spec,
        sources=MappingProxyType(sources),
        origins=MappingProxyType(origins),
        cluster_file=str(cluster_file) if cluster_file is not None else None,
    )


def _shared_field_issue(
    spec: RunSpec, file_layer: Mapping[str, Provided], given: Mapping[str, Any],
    sources: Mapping[str, Source], origins: Mapping[str, str],
) -> Issue | None:  # fmt: skip
    """A per-node option (command line / ``ISLAB_*``) that gives a field every node must agree on
    (:data:`~islab.spec.launch_rules.SHARED_FIELDS`) another value than the shared cluster file
    does -- its own value, or the default when it sets none: the other nodes run the file, so the
    nodes would hang at the rendezvous or train different things. It applies to one node of the
    file's multi-node job (``--node-rank`` given); elsewhere the command line still overrides the
    file as usual (e.g. reusing a file's settings for one node). ``given``: the merged layers before
    the presets rewrote them."""
    file_nnodes = parse_node_range(str(file_layer["nnodes"].value)) if "nnodes" in file_layer else None
    if spec.node_rank is None or spec.nnodes <= 1 or file_nnodes is None or file_nnodes[1] <= 1:
        return None
    file_name = next(iter(file_layer.values())).origin.split(":")[0]
    for name in shared_fields(spec.launcher):
        if sources.get(name) not in (Source.CLI, Source.ENV) or name not in given:
            continue  # from the file, a default, or derived by a preset from a field checked itself
        shared = file_layer[name].value if name in file_layer else _shared_default(name, file_layer)
        replaced = _RIVALS.get(name) in file_layer  # e.g. --max-iterations over the file's total_env_steps
        if replaced or _comparable(name, given[name]) != _comparable(name, shared):
            what = (
                f"the file's {_RIVALS[name]}"
                if replaced
                else (
                    f"the file's {shared!r}" if name in file_layer else f"the default {shared!r} (the file sets none)"
                )
            )
            return Issue(
                _label(name, origins),
                f"{given[name]!r} on this node differs from {what}, which every node of the {file_name} job "
                "must agree on (the other nodes would hang at the rendezvous or train something else)",
                f"Set it in {file_name} for all nodes, or drop the option",
            )  # fmt: skip
    return None


def _shared_default(name: str, file_layer: Mapping[str, Provided]) -> Any:
    """What a node running the cluster file alone gets for ``name``: the task's environment count,
    or the schema's default."""
    if name == "num_envs":
        task = file_layer["task"].value if "task" in file_layer else DEFAULT_TASK
        return TASKS[task].default_num_envs if task in TASKS else None
    section, _, key = name.rpartition(".")
    model = Rendezvous if section == "rendezvous" else RunSpec
    return model.model_fields[key].get_default(call_default_factory=True)


def _comparable(name: str, value: Any) -> Any:
    """One form for a value as a layer gives it: ``2`` and ``"2:2"`` nodes, lists and tuples."""
    if name == "nnodes":
        return parse_node_range(str(value)) or value
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return dict(value) if isinstance(value, Mapping) else value


def _announce_task_module(module: Any, origins: Mapping[str, str]) -> None:
    """Add the tasks of ``--task-module`` to the registry (read statically; the ranks import it)."""
    if not isinstance(module, str) or not MODULE_PATTERN.fullmatch(module):
        return  # RunSpec reports the malformed name
    try:
        add_task_module(module)
    except TaskRegistrationError as exc:
        raise SpecError(
            Issue(_label("task_module", origins), str(exc), "Check the module name and its gym.register calls")
        ) from None


# ----------------------------------------------------------------------------------------------
# pydantic errors -> one human line each
# ----------------------------------------------------------------------------------------------

_FIELD_FIX = {
    "num_envs": "Give the number of parallel environments per rank, e.g. 4096",
    "max_iterations": "Give the number of training iterations (each rank runs them all), "
    f"e.g. {default_of('max_iterations')}",
    "total_env_steps": "Give the env steps to train, summed over all ranks, e.g. 1000000",
    "nnodes": "Give the number of machines, e.g. 2",
    "nproc_per_node": "Give the processes per node, e.g. --gpus 2 or --device cpu --nproc 2",
    "node_rank": "Give this node's index, 0 for the first node",
    "seed": f"Give a whole number ≥ 0, e.g. {default_of('seed')}",
    "max_restarts": "Give a whole number ≥ 0, e.g. 0",
    "rendezvous.master_port": "Choose a port between 1 and 65535, e.g. 29500",
    "rendezvous.timeout_s": "Give the seconds node 0 waits for the other nodes, e.g. 300",
    "rendezvous.last_call_s": "Give the seconds an elastic c10d rendezvous waits for more nodes, e.g. 30",
    "checkpoint_interval": "Give the iterations between checkpoints, "
    f"e.g. {default_of('checkpoint_interval')} (0: only at the end)",
    "hang_timeout_s": "Give the seconds without a finished iteration before the job is stopped, e.g. 600 (0: never)",
}


def _label(dotted: str, origins: Mapping[str, str]) -> str:
    origin = origins.get(dotted)
    if origin is None or origin.endswith(f": {dotted}"):
        # file values: "two-node.yaml: nnodes" already names the field
        return origin or dotted
    return f"{dotted} ({origin})"


def _issue_from_pydantic(err: Mapping[str, Any], origins: Mapping[str, str]) -> Issue:
    loc = [str(part) for part in err["loc"]]
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "spec_rule":
        dotted = ctx.get("field") or ".".join(loc)
        label = _env_label(dotted, origins) if dotted.startswith("env.") else _label(dotted, origins)
        problem = ctx["problem"]
        if ctx.get("given_by"):
            origin = origins.get(ctx["given_by"])
            problem = f"{problem} (given by {origin})" if origin else problem
        return Issue(label, problem, ctx["fix"])
    # Errors inside a mapping/tuple (env.NAME, overrides.0) are reported on the parent field.
    dotted = ".".join(loc[:2]) if loc and loc[0] == "rendezvous" else (loc[0] if loc else "spec")
    label = _label(dotted, origins)
    fix = _FIELD_FIX.get(dotted, "See docs/CLI.md for the field's format")

    if kind == "extra_forbidden":
        parent_fields = list(Rendezvous.model_fields) if loc[0] == "rendezvous" else [*INPUT_FIELDS]
        unknown = loc[-1]
        hint = suggest(unknown, parent_fields)
        where = "rendezvous" if loc[0] == "rendezvous" else "the spec"
        file_origin = origins.get(dotted, dotted)
        return Issue(
            file_origin,
            f"unknown key {unknown!r} in {where}",
            f"{hint + ' ' if hint else ''}Valid keys: {', '.join(parent_fields)}",
        )
    if kind == "literal_error":
        choices = CHOICES.get(dotted, ())
        hint = suggest(str(value), choices)
        return Issue(
            label,
            f"{value!r} is not one of {', '.join(choices)}",
            hint or f"Choose one of {', '.join(choices)}",
        )
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return Issue(label, f"expected a whole number, got {value!r} ({type(value).__name__})", fix)
    if kind in {"greater_than_equal", "less_than_equal"}:
        low, high = ctx.get("ge"), ctx.get("le")
        if dotted == "rendezvous.master_port":
            problem = f"port {value} is outside 1–65535"
        elif low == 1:
            problem = f"must be at least 1, got {value}"
        else:
            problem = f"must be ≥ {low}" + (f" and ≤ {high}" if high is not None else "") + f", got {value}"
        return Issue(label, problem, fix)
    if kind in {"string_type", "str_type"}:
        return Issue(label, f"expected text, got {value!r} ({type(value).__name__})", "Quote the value")
    if kind in {"dict_type", "model_type", "mapping_type"}:
        return Issue(label, f"expected a mapping, got {value!r}", "Write it as nested key: value lines")
    if kind in {"tuple_type", "list_type"}:
        return Issue(label, f"expected a list, got {value!r}", "Write it as a YAML list")
    return Issue(label, str(err.get("msg", "invalid value")), fix)


def _env_label(dotted: str, origins: Mapping[str, str]) -> str:
    origin = origins.get("env")
    return f"{origin.rsplit(':', 1)[0]}: {dotted}" if origin and ":" in origin else dotted


# ----------------------------------------------------------------------------------------------
# Rules that read the disk (after the schema accepted the spec)
# ----------------------------------------------------------------------------------------------


def install_extra_hint(extra: str) -> str:
    """How to install an extra without letting its dependencies replace the user's torch."""
    return (
        f"Install it with your torch pinned: echo \"torch==$(python -c 'import torch; print(torch.__version__)')\" "
        f"> torch-pin.txt && python -m pip install -c torch-pin.txt 'islab-train[{extra}]'"
    )


def _disk_issue(spec: RunSpec) -> Issue | None:
    """The task's extra and wandb for ``--logger wandb`` must be installed (checked without importing
    them); the agent config must take the overrides and give a rollout length (it turns iterations
    into env steps for the budget the dry run shows); a ``--resume`` path must hold a checkpoint."""
    if spec.resume is not None and spec.node_rank in (None, 0):
        # Only node 0 reads the checkpoint (it broadcasts it), so other nodes need not have it.
        path = Path(spec.resume)
        checkpoint = path / "checkpoints" / "latest.pt" if path.is_dir() else path
        if not checkpoint.is_file():
            return Issue(
                "resume",
                f"{str(path)!r} is neither a checkpoint file nor a run directory with checkpoints/latest.pt",
                "Pass the run directory printed at the end of a run, or one of its checkpoints/*.pt files",
            )
    extra = missing_extra(spec.task)
    if extra is not None:
        return Issue("task", f"{spec.task} needs the [{extra}] extra, which is not installed (no module {extra!r})",
                     install_extra_hint(extra))  # fmt: skip
    if spec.logger == "wandb" and importlib.util.find_spec("wandb") is None:
        return Issue("logger", "wandb needs the [wandb] extra, which is not installed (no module 'wandb')",
                     f"{install_extra_hint('wandb')}, or use --logger tensorboard")  # fmt: skip
    configured = libraries_with_agent_config(spec.task)
    if spec.lib not in configured:
        return Issue(
            "lib",
            f"task {spec.task} has no {spec.lib} agent config (it has: {', '.join(configured) or 'none'})",
            (f"Choose --lib {configured[0]}, or" if configured else "To train it with this library,")
            + f" register {LIBRARIES[spec.lib].cfg_entry_point_key} in the task's gym.register kwargs "
            f"with a YAML in {spec.lib}'s format",
        )
    try:
        rollout_length(spec.lib, load_agent_config(spec.lib, spec.task, spec.overrides))
    except AgentConfigError as error:
        return Issue(error.field, error.message, f"The keys are those of {agent_config_path(spec.lib, spec.task)}")
    return None
