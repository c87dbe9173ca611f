"""What the pre-flight probe concludes from what the ranks told each other -- pure, torch-free.

The probe (:mod:`islab.preflight.probe`) gathers one identity per rank and times the all-reduces;
this module turns them into the problems (two ranks on one GPU, NCCL versions that differ across
nodes, nodes started with different commands) and the ``preflight.json`` record, and the launcher
prints :func:`summary_line` from it. Kept apart from the probe so that both sides can read it
without torch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from islab import rundir

FIELDS_VARIABLE = "ISLAB_PREFLIGHT_FIELDS"  # JSON: the fields this node's spec has that every node must share
PROBLEM_EXIT = 3  # every rank exits with it when the probe found a problem (not a crash)
DONE_MARK = "[islab] pre-flight rank"  # every rank's last line: "[islab] pre-flight rank R: ok|problems"


def done_line(rank: int, ok: bool) -> str:
    return f"{DONE_MARK} {rank}: {'ok' if ok else 'problems'}"


def _problem(what: str, ranks: Sequence[int], fix: str) -> dict[str, Any]:
    return {"what": what, "ranks": sorted(ranks), "fix": fix}


def identity_problems(identities: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Placement, NCCL versions and the fields every node must agree on."""
    problems = []
    on_gpu: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ident in identities:
        if ident.get("gpu_uuid"):
            on_gpu[(ident["host"], ident["gpu_uuid"])].append(ident["rank"])
    for (host, uuid), ranks in on_gpu.items():
        if len(ranks) > 1:
            problems.append(_problem(
                f"ranks {', '.join(map(str, ranks))} share one GPU ({uuid} on {host})", ranks,
                "Start one rank per GPU: --gpus N with N at most the GPUs CUDA exposes on the node "
                "(nvidia-smi -L; CUDA_VISIBLE_DEVICES must name distinct GPUs)",
            ))  # fmt: skip
    versions = {ident["nccl"] for ident in identities if ident.get("nccl")}
    if len(versions) > 1:
        by_version = {v: [i["rank"] for i in identities if i.get("nccl") == v] for v in sorted(versions)}
        listed = "; ".join(f"NCCL {v} on ranks {', '.join(map(str, r))}" for v, r in by_version.items())
        problems.append(_problem(
            f"the nodes run different NCCL versions ({listed})", [r for ranks in by_version.values() for r in ranks],
            "Install the same torch build (it brings its NCCL) on every node",
        ))  # fmt: skip
    problems += field_disagreements(identities)
    return problems


def field_disagreements(identities: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fields that a node set differently from node 0's first rank: each named with both values."""
    if not identities:
        return []
    reference = identities[0]
    base = reference.get("fields") or {}
    problems = []
    seen: set[tuple[str, str]] = set()
    for ident in identities[1:]:
        fields = ident.get("fields") or {}
        for name in sorted(set(base) | set(fields)):
            mine, theirs = base.get(name), fields.get(name)
            if mine != theirs and (name, ident["host"]) not in seen:
                seen.add((name, ident["host"]))
                ranks = [i["rank"] for i in identities if (i.get("fields") or {}).get(name) == theirs]
                problems.append(_problem(
                    f"{name} is {theirs!r} on {ident['host']} (rank {ident['rank']}) but {mine!r} on "
                    f"{reference['host']} (rank 0): the nodes were started with different commands", ranks,
                    f"Start every node with the same {name} (the same command line or cluster file; only "
                    "--node-rank differs)",
                ))  # fmt: skip
    return problems


def build_report(
    identities: Sequence[Mapping[str, Any]], measured: Sequence[Mapping[str, Any]], seconds: float,
    problems: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """preflight.json: {"ok", "world_size", "nodes", "ranks", "all_reduce", "seconds", "problems"}."""
    problems = list(problems)
    inexact = [row["bytes"] for row in measured if row.get("exact") is False]
    if inexact or any(row.get("broadcast_exact") is False for row in measured):
        problems.append(_problem(
            f"collectives returned wrong values (all-reduce sizes {inexact or 'ok'}; broadcast checked)",
            [i["rank"] for i in identities],
            "A broken transport: retry with --nccl-safe (docs/NCCL.md) and report the NCCL log in the run directory",
        ))  # fmt: skip
    keys = ("rank", "host", "local_rank", "device", "gpu_uuid")
    return {
        "ok": not problems,
        "world_size": len(identities),
        "nodes": _node_count(identities),
        "ranks": [{key: ident.get(key) for key in keys} for ident in identities],
        "all_reduce": [{k: row[k] for k in ("bytes", "median_us", "busbw_gbps")} for row in measured if "bytes" in row],
        "seconds": round(seconds, 2),
        "problems": problems,
    }


REPORT_KEYS = ("ok", "world_size", "nodes", "ranks", "all_reduce", "seconds", "problems")
PREDICTION_KEY = "prediction"  # added by the launcher for islab's worker (islab.preflight.prediction)
PROBLEM_KEYS = ("what", "ranks", "fix")


def public_report(report: Mapping[str, Any]) -> dict[str, Any]:
    """The documented shape of ``preflight.json`` / ``doctor --collectives --json``: only
    :data:`REPORT_KEYS` (and :data:`PREDICTION_KEY` when there is one), each problem only :data:`PROBLEM_KEYS`."""
    shaped = {key: report.get(key) for key in REPORT_KEYS}
    shaped["problems"] = [{key: problem.get(key) for key in PROBLEM_KEYS} for problem in report.get("problems") or []]
    if report.get(PREDICTION_KEY):
        shaped[PREDICTION_KEY] = dict(report[PREDICTION_KEY])
    return shaped


def _node_count(identities: Sequence[Mapping[str, Any]]) -> int:
    """Nodes = distinct (rank - local rank): the first global rank of each node. Host names alone
    undercount where nodes share one (containers, network namespaces)."""
    try:
        return len({int(ident["rank"]) - int(ident["local_rank"]) for ident in identities})
    except (KeyError, TypeError, ValueError):
        return len({ident.get("host") for ident in identities})


def write_report(run_dir: str | Path, report: Mapping[str, Any]) -> Path:
    return rundir.write_json(rundir.preflight_path(run_dir), public_report(report))


def _size(n: int) -> str:
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def summary_line(report: Mapping[str, Any]) -> str:
    """``pre-flight: 8 ranks on 2 nodes, all_reduce 4 B 31 us, 64 MB 38 GB/s, 2.4 s``."""
    head = f"pre-flight: {report['world_size']} ranks on {report['nodes']} node(s)"
    rows = report.get("all_reduce") or []
    parts = [head]
    if rows:
        small, large = rows[0], rows[-1]
        bw = large.get("busbw_gbps")
        bandwidth = f"{bw:.3g} GB/s" if bw is not None and math.isfinite(bw) else "-"
        parts.append(
            f"all_reduce {_size(small['bytes'])} {small['median_us']:.0f} us, {_size(large['bytes'])} {bandwidth}"
        )
    parts.append(f"{report['seconds']:.1f} s")
    line = ", ".join(parts)
    return line if report.get("ok") else f"{line}: {len(report['problems'])} problem(s)"
