"""Schema errors -> one human line each, naming the field as the user gave it.

The validation step (:func:`islab.resolve.steps.validate`) hands pydantic's errors here with the
origin words of every field (``--num-envs``, ``ISLAB_SEED``, ``cpu.yaml: nnodes``), so that a
message says where the bad value came from and how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from islab.spec.issues import Issue, suggest
from islab.spec.run_spec import CHOICES, INPUT_FIELDS, Rendezvous
from islab.spec.worker_args import default_of

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


def label_of(dotted: str, origins: Mapping[str, str]) -> str:
    """How a message names a field: ``num_envs (--num-envs)``, or a file's ``cpu.yaml: nnodes``."""
    origin = origins.get(dotted)
    if origin is None or origin.endswith(f": {dotted}"):
        # file values: "two-node.yaml: nnodes" already names the field
        return origin or dotted
    return f"{dotted} ({origin})"


def issue_from_pydantic(err: Mapping[str, Any], origins: Mapping[str, str]) -> Issue:
    loc = [str(part) for part in err["loc"]]
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "spec_rule":
        dotted = ctx.get("field") or ".".join(loc)
        label = _env_label(dotted, origins) if dotted.startswith("env.") else label_of(dotted, origins)
        problem = ctx["problem"]
        if ctx.get("given_by"):
            origin = origins.get(ctx["given_by"])
            problem = f"{problem} (given by {origin})" if origin else problem
        return Issue(label, problem, ctx["fix"])
    # Errors inside a mapping/tuple (env.NAME, overrides.0) are reported on the parent field.
    dotted = ".".join(loc[:2]) if loc and loc[0] == "rendezvous" else (loc[0] if loc else "spec")
    label = label_of(dotted, origins)
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
