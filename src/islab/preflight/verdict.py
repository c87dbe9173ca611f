"""Why a pre-flight failed, as one message: who never arrived, the known failures, NCCL's own lines (pure).

When the probe cannot finish, the ranks cannot say why themselves -- a rank that never started writes
nothing, and a peer that never answers looks like a timeout to everyone else. What one node's
islab-train has is its ranks' probe logs (``preflight/rank_<R>.log``), its launcher's last lines
(torchrun's "1/2 clients joined", a rank's traceback) and, when the probe got that far, rank 0's
``preflight.json``. From them :func:`verdict` names

* the nodes that never arrived (this node's ranks never started: the rendezvous did not complete)
  and the ranks that started but did not answer (no "pre-flight rank R: ..." line);
* the known failures (:func:`islab.preflight.triage.triage`) found in any of those lines, each with
  its fix;
* the lines of NCCL's INFO log that matter (:func:`~islab.preflight.triage.lines_that_matter`).

The same problems go into ``preflight.json`` (``ok: false``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from islab.preflight.report import DONE_MARK
from islab.preflight.triage import lines_that_matter, triage

_JOINED = re.compile(r"(\d+)/(\d+) clients joined")


@dataclass(frozen=True)
class Evidence:
    """What one node saw of its pre-flight probe."""

    node_rank: int
    nnodes: int
    nproc_per_node: int
    rank_logs: Mapping[int, Sequence[str]]  # this node's ranks' probe logs (empty: never started)
    launcher_lines: Sequence[str] = ()
    exceptions: Mapping[int, str] = field(default_factory=dict)  # rank -> its last exception line
    killed_at_limit: bool = False
    seconds: float = 0.0
    timeout_s: int = 60
    rendezvous: str | None = None
    report: Mapping[str, Any] | None = None  # preflight.json of this probe, when rank 0 wrote one
    # Another node than 0, after its ranks never started: what a TCP connect to the rendezvous got
    # ("open", "Connection refused", "no answer within 1.5 s", ...): islab.doctor.probes.connect_state.
    rendezvous_reach: str | None = None

    def ranks_of(self, node: int) -> list[int]:
        return list(range(node * self.nproc_per_node, (node + 1) * self.nproc_per_node))


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _problem(what: str, ranks: Sequence[int], fix: str) -> dict[str, Any]:
    return {"what": what, "ranks": sorted(ranks), "fix": fix}


def absent_nodes(evidence: Evidence) -> list[int]:
    """Nodes that never arrived, as far as this node can tell: its own ranks never started (torchrun
    starts them once the rendezvous completed), so every other node is suspect; torchrun's static
    store says how many joined ("1/2 clients joined"), which on node 0 leaves the others."""
    others = [node for node in range(evidence.nnodes) if node != evidence.node_rank]
    started = any(evidence.rank_logs.get(rank) for rank in evidence.ranks_of(evidence.node_rank))
    if started or not others:
        return []
    for line in evidence.launcher_lines:
        match = _JOINED.search(line)
        if match and int(match.group(1)) >= int(match.group(2)):
            return []  # everyone joined: the failure is elsewhere
    return others


def _unreachable_rendezvous(evidence: Evidence) -> dict[str, Any] | None:
    """On a node other than 0: why it could not join, from a TCP connect to the rendezvous."""
    reach, where = evidence.rendezvous_reach, evidence.rendezvous
    if evidence.node_rank == 0 or not reach or not where or reach == "open":
        return None
    ranks = evidence.ranks_of(0)
    port = where.rpartition(":")[2]
    if reach.startswith("no answer"):
        return _problem(
            f"master port: node {evidence.node_rank} cannot reach node 0's rendezvous at {where}: a connection got "
            f"{reach} -- packets to the port are dropped (a firewall on node 0 or between the nodes), or the "
            "address is not node 0's",
            ranks,
            f"Open port {port} on node 0 (iptables -L -n / ufw status; e.g. iptables -I INPUT -p tcp --dport {port} "
            "-j ACCEPT) and check that the master address is node 0's address as seen from this node",
        )  # fmt: skip
    return _problem(
        f"node 0 ({_ranks(ranks)}) is not accepting connections at {where} ({reach}): it is not running, "
        f"already gave up, or listens elsewhere",
        ranks,
        "Start node 0 with the same options and --node-rank 0 (within the pre-flight timeout of this node), "
        "and check the master address and port",
    )  # fmt: skip


def verdict(evidence: Evidence) -> tuple[list[dict[str, Any]], list[str]]:
    """(problems for preflight.json, the message's lines) of a failed pre-flight."""
    problems: list[dict[str, Any]] = list((evidence.report or {}).get("problems") or [])
    where = evidence.rendezvous or "the rendezvous"
    absent = absent_nodes(evidence)
    unreachable = _unreachable_rendezvous(evidence) if absent else None
    if unreachable is not None:
        problems.append(unreachable)
    elif absent:
        ranks = [rank for node in absent for rank in evidence.ranks_of(node)]
        nodes = ", ".join(map(str, absent))
        problems.append(_problem(
            f"node {nodes} ({_ranks(ranks)}) never arrived at {where} within {evidence.timeout_s} s",
            ranks,
            f"Start islab-train with the same options and --node-rank {absent[0]} on that node, and check that it "
            f"reaches {where} (ping the address; a firewall on the port: iptables -L / ufw status)",
        ))  # fmt: skip
    mine = evidence.ranks_of(evidence.node_rank)
    started = [rank for rank in mine if evidence.rank_logs.get(rank)]
    silent = [
        rank for rank in started if not any(DONE_MARK in line for line in evidence.rank_logs[rank])
    ]  # fmt: skip
    findings = triage([*evidence.launcher_lines, *(line for rank in mine for line in evidence.rank_logs.get(rank, ()))])
    if silent and not findings:
        raised = {rank: evidence.exceptions[rank] for rank in silent if rank in evidence.exceptions}
        how = "; ".join(f"rank {rank}: {text}" for rank, text in raised.items())
        limit = " (killed at the pre-flight limit)" if evidence.killed_at_limit else ""
        problems.append(_problem(
            f"{_ranks(silent)} on node {evidence.node_rank} started but did not finish the checks{limit}"
            + (f": {how}" if how else ""),
            silent,
            "Read the ranks' probe logs below; a rank waiting on peers means another node's ranks did not take part",
        ))  # fmt: skip
    for finding in findings:
        problems.append(finding.to_dict(silent or started or mine))
    if not started and not absent and evidence.killed_at_limit:
        problems.append(_problem(
            f"no rank of node {evidence.node_rank} started within {evidence.timeout_s} s (the launcher was stopped)",
            mine, "Read the launcher's output in the probe logs; check that the ranks' interpreter (--python) starts",
        ))  # fmt: skip
    if not problems:
        problems.append(_problem(
            f"the probe ended without a verdict on node {evidence.node_rank}", mine,
            "Read the probe's rank logs; report it with them if the cause is not there",
        ))  # fmt: skip
    lines = [f"  - {problem['what']}. Fix: {problem['fix']}" for problem in problems]
    said = lines_that_matter(line for rank in mine for line in evidence.rank_logs.get(rank, ()))
    if said:
        lines.append("  NCCL said:")
        lines += [f"    {line}" for line in said]
    return problems, lines
