"""What ``islab-train doctor`` prints (a table or JSON) and the one-line messages of the cheap
pre-launch subset; the checks themselves are in :mod:`islab.doctor.checks`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from islab.doctor.checks import Check, Facts, all_passed

STYLE = {"pass": ("✔ pass", "green"), "warn": ("! warn", "yellow"), "fail": ("✘ fail", "bold red"),
         "skip": ("– skip", "dim")}  # fmt: skip


def to_json(checks: Sequence[Check], facts: Facts) -> str:
    return json.dumps(
        {
            "ok": all_passed(checks),
            "node_rank": facts.node_rank,
            "checks": [asdict(check) for check in checks],
        },
        indent=2,
    )


def render_table(checks: Sequence[Check], facts: Facts, console: Any) -> None:
    from rich.table import Table

    spec = facts.spec
    where = f"node {facts.node_rank}" if facts.node_rank is not None else "this node (node rank not given)"
    table = Table(
        title=f"islab-train doctor: {where}, {spec.lib}/{spec.ml_framework} on {spec.device}, "
        f"{spec.nnodes} node(s) x {spec.nproc_per_node}",
        title_justify="left",
        show_lines=False,
    )
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("details")
    table.add_column("fix")
    from rich.markup import escape  # details and fixes are plain text: `pip install "jax[cuda12]"` is no markup

    for check in checks:
        label, style = STYLE[check.status]
        table.add_row(escape(check.name), f"[{style}]{label}[/{style}]", escape(check.detail), escape(check.fix))
    console.print(table)
    failed = sum(check.status == "fail" for check in checks)
    warned = sum(check.status == "warn" for check in checks)
    verdict = "[green]ready to launch[/green]" if not failed else f"[bold red]{failed} check(s) failed[/bold red]"
    console.print(f"{verdict}" + (f", {warned} warning(s)" if warned else ""))


def launch_messages(checks: Sequence[Check]) -> tuple[list[str], list[str]]:
    """The cheap subset before a launch: (errors, warnings) as one-line messages."""

    def line(kind: str, check: Check) -> str:
        return f"{kind}: {check.name}: {check.detail.rstrip('.')}. {check.fix.rstrip('.')}."

    errors = [line("error", check) for check in checks if check.status == "fail"]
    warnings = [line("warning", check) for check in checks if check.status == "warn"]
    return errors, warnings
