"""What ``--dry-run`` prints: the plan as JSON (``--json``) or as text a shell can run as-is.

Every line that is not a command is a shell comment, every command is one line whatever an argument
holds (:func:`islab.spec.text.shell_join`), and secret-looking environment values are masked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from islab.plan import skrl_jax
from islab.plan.launch_plan import LaunchPlan
from islab.plan.plan import TO_TARGET_TEXT
from islab.resolve.resolved import ResolvedSpec
from islab.spec.issues import mask_env
from islab.spec.run_spec import AGENT_OPTION_FIELDS, WORKER_ONLY_FIELDS
from islab.spec.text import comment, shell_join, shell_quote


def shell_line(argv: tuple[str, ...] | list[str], env: Mapping[str, str]) -> str:
    """``NAME=value … cmd args`` that bash runs as-is, on one line whatever an argument holds;
    secret-looking values masked."""
    prefix = [f"{name}={shell_quote(value)}" for name, value in mask_env(env).items()]
    return " ".join([*prefix, shell_join(argv)])


def format_json(plan: LaunchPlan) -> str:
    """The machine-readable dry run: launcher, and per node the full argv and the added env."""
    payload = {
        "launcher": plan.launcher,
        "budget": plan.budget.to_plain() if plan.budget is not None else None,
        "nodes": [
            {"node_rank": node.node_rank, "argv": list(node.argv), "env": mask_env(node.env)} for node in plan.nodes
        ],
    }
    return json.dumps(payload, indent=2)


def _comment_value(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}" if value else "{}"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) if value else "[]"
    return "-" if value is None else str(value)


def format_text(plan: LaunchPlan, resolved: ResolvedSpec) -> str:
    """The human dry run: a comment block saying where each value came from, then per node the
    command. Every non-command line is a shell comment, so the whole output can be pasted."""
    spec = resolved.spec
    lines = [
        comment(
            f"islab-train plan: {plan.launcher}, {spec.nnodes_text.replace(':', '-')} node(s) x "
            f"{spec.nproc_per_node} process(es) on {spec.device}, world size "
            f"{'up to ' if spec.elastic else ''}{spec.nnodes * spec.nproc_per_node}"
        ),
        comment(f"run dir: {plan.run_dir}"),
        *(
            [comment(f"budget: {plan.budget.describe(resuming=spec.resume is not None)}")]
            if plan.budget is not None
            else []
        ),
        *([comment(f"budget: {TO_TARGET_TEXT}")] if plan.to_target else []),
        comment("resolved spec (field = value  (source: cli|env|file|default)):"),
    ]
    if resolved.cluster_file:
        lines.append(comment(f"  cluster file: {resolved.cluster_file}"))
    rows = [row for row in resolved.explain() if row[0] not in AGENT_OPTION_FIELDS or row[1] not in (None, False)]
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        if name == "hang_timeout_s" and plan.hang_timeout_s:
            pass  # the hang watch reads an entry point's TensorBoard events (islab.run.event_hangs)
        elif (name in WORKER_ONLY_FIELDS) if spec.entrypoint is not None else name in ("entrypoint", "args"):
            continue  # a user entry point ignores the worker's fields; the worker has no entry point
        origin = resolved.origins.get(name)
        detail = f"source: {source.value}" + (f", {origin}" if origin and source.value != "file" else "")
        if value is None and name in plan.derived:
            value, detail = plan.derived[name], f"{detail}, chosen by the planner"
        elif name in ("max_iterations", "total_env_steps") and plan.to_target and value is not None:
            detail = f"{detail}, not passed: resuming finishes the run's original target"
        elif name == "max_iterations" and spec.total_env_steps is not None:
            detail = f"{detail}, derived from total_env_steps by each run"
        lines.append(comment(f"  {name.ljust(width)} = {_comment_value(value)}  ({detail})"))
    if plan.launcher == skrl_jax.NAME:
        lines.append(
            comment(
                "note: a real launch starts these ranks itself (same JAX_* variables as skrl's "
                "launcher) so that a failing rank fails the run"
            )
        )
    for node in plan.nodes:
        lines.append(comment(f"node {node.node_rank}"))
        lines.append(shell_line(node.argv, node.env))
    return "\n".join(lines)
