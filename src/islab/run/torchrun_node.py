"""torchrun's failures: which rank failed, how it ended and what it raised, and the node runner that asks.

**Failures.** The worker's ``main`` is wrapped in torch's ``@record``: a rank that raises writes
``{"message": {"message": "RuntimeError: boom", "extraInfo": {"timestamp": ...}}}`` to the file
named by ``TORCHELASTIC_ERROR_FILE``, which torchrun sets per rank to
``<log-dir>/<run_id>_<random>/attempt_<restart>/<local_rank>/error.json``
(``torch.distributed.elastic.multiprocessing.api.DefaultLogsSpecs.reify``). Those files name the
failed ranks and their exception (:func:`error_file_failures`). A rank killed by a signal writes
none, so torchrun's console failure summary (``rank : 1 (local_rank: 1)`` / ``exitcode : -9``) is
read as the fallback (:func:`find_failures`), then tracebacks in the rank logs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

from islab.plan.torchrun import forked_argv, nproc_of, ranks_env, supervised_argv, worker_script
from islab.run.console import route_line
from islab.run.failures import (
    TRACEBACK_SEARCH_LINES,
    cause_named,
    describe_end,
    failed_rank_lines,
    failed_ranks_from_logs,
    last_exception_line,
    log_tail,
    lost_peer,
    rendezvous_message,
)
from islab.run.processes import Child, Outcome
from islab.rundir import logs_dir, rank_log, read_json_object

if TYPE_CHECKING:
    from islab.plan.launch_plan import LaunchPlan, NodePlan

# torchrun's failure summary: "  rank      : 1 (local_rank: 1)"
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
# Lines of torchrun's *own* output (not a rank's) that mean the nodes never all arrived:
# c10d: "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError";
# static, node 0: "DistStoreError: Timed out after 6 seconds waiting for clients. 1/2 clients joined."
_RENDEZVOUS_TIMEOUT = re.compile(r"RendezvousTimeoutError|waiting for clients|Dist(Store|Network)Error:.*[Tt]imed out")


# ----------------------------------------------------------------------------------------------
# Reading failures (pure over files and lines)
# ----------------------------------------------------------------------------------------------


def error_file_failures(log_dir: str | Path) -> list[tuple[int, str]]:
    """(local rank, exception line) for every rank that left an ``error.json`` in torchrun's latest
    attempt under ``log_dir``, the earliest failure first (the files' timestamps, then the rank)."""
    attempts: dict[int, list[Path]] = {}
    for path in Path(log_dir).glob("*/attempt_*/*/error.json"):
        with contextlib.suppress(ValueError):
            attempts.setdefault(int(path.parent.parent.name.removeprefix("attempt_")), []).append(path)
    if not attempts:
        return []
    found: list[tuple[int, int, str]] = []
    for path in attempts[max(attempts)]:
        data = read_json_object(path)
        if data is None or not path.parent.name.isdigit():
            continue
        local_rank = int(path.parent.name)
        message = data.get("message")
        if isinstance(message, dict):
            text = str(message.get("message", ""))
            stamp = message.get("extraInfo", {}).get("timestamp", 0)
        else:
            text, stamp = str(message or ""), data.get("timestamp", 0)
        with contextlib.suppress(ValueError, TypeError):
            found.append((int(stamp), local_rank, text.strip().splitlines()[0] if text.strip() else ""))
    # A rank that only lost its peer (gloo's "Connection closed by peer") is a consequence, never the
    # root cause; error-file timestamps are whole seconds, so the ranks often tie on them.
    found.sort(key=lambda item: (lost_peer(item[2]), item[0], item[1]))
    return [(local_rank, text) for _, local_rank, text in found]


class _Ended(NamedTuple):
    """One rank in torchrun's failure summary."""

    rank: int
    local_rank: int
    code: int
    root: bool  # torchrun's "Root Cause (first observed failure)"


def _summary(lines: Iterable[str]) -> list[_Ended]:
    """Every rank of the summary once, the root cause first."""
    entries: list[_Ended] = []
    in_root_cause = False
    pending: tuple[int, int] | None = None
    for line in lines:
        if "Root Cause" in line:
            in_root_cause = True
        match = _FAILED_RANK.match(line)
        if match:
            pending = (int(match.group(1)), int(match.group(2)))
            continue
        exit_match = _EXITCODE.match(line)
        if exit_match and pending is not None:
            code = int(exit_match.group(1))
            entries.append(_Ended(*pending, code, in_root_cause))
            pending = None
    entries.sort(key=lambda entry: not entry.root)
    seen: dict[int, _Ended] = {}
    for entry in entries:
        seen.setdefault(entry.rank, entry)
    return list(seen.values())


def rendezvous_timed_out(lines: Iterable[str]) -> bool:
    """Did torchrun's agent give up waiting for the other nodes? Only torchrun's own lines count:
    a rank's line (prefixed ``[default<L>]:`` by ``--tee``) is a training failure, not a rendezvous."""
    return any(_RENDEZVOUS_TIMEOUT.search(line) for line in lines if route_line(line, 0)[0] is None)


def find_failures(
    log_dir: str | None, lines: Sequence[str], run_dir: str, first_rank: int
) -> list[tuple[int, int | None, str | None]]:
    """(global rank, exit code or None, exception or None) of the failed ranks, the root cause first.

    The error files say which ranks raised and with what; a rank killed by a signal leaves none, so
    torchrun's summary names it (and maps local to global ranks where the node's first rank is not
    known: c10d assigns it). The order is the likelihood of being the cause:
    torchrun's root cause when it left no error file; ranks that raised an exception of their own;
    other ranks that ended without an error file (killed, or an exit code) and that torchrun did not
    stop itself with SIGTERM; ranks whose only exception is a lost peer (gloo's "Connection reset /
    closed by peer": a consequence, whatever its timestamp says). Ranks torchrun stopped only when
    nothing else is known; with no error file and no summary, ranks with a traceback in their log."""
    summary = _summary(lines)
    offset = next((entry.rank - entry.local_rank for entry in summary), first_rank)
    codes = {entry.rank: entry.code for entry in summary}
    raised = (
        [(offset + local, codes.get(offset + local), text or None) for local, text in error_file_failures(log_dir)]
        if log_dir
        else []
    )
    named = {rank for rank, _, _ in raised}
    silent = [entry for entry in summary if entry.rank not in named]
    own = [failure for failure in raised if not lost_peer(failure[2])]
    collateral = [failure for failure in raised if lost_peer(failure[2])]
    root = [entry for entry in silent if entry.root]
    killed = [entry for entry in silent if not entry.root and entry.code != -signal.SIGTERM]
    stopped = [entry for entry in silent if not entry.root and entry.code == -signal.SIGTERM]
    ordered = [
        *((entry.rank, entry.code, None) for entry in root),
        *own,
        *((entry.rank, entry.code, None) for entry in killed),
        *collateral,
    ] or [(entry.rank, entry.code, None) for entry in stopped]
    if ordered:
        return ordered
    return [(rank, None, None) for rank in failed_ranks_from_logs(run_dir)]


def failure_message(
    status: int, failures: Sequence[tuple[int, int | None]], run_dir: str, node_rank: int, exception: str | None
) -> str:
    if failures:
        ranks = [rank for rank, _ in failures]
        logs = ", ".join(str(rank_log(run_dir, rank)) for rank in ranks)
        named = ", ".join(str(rank) for rank in ranks)
        how = describe_end(failures[0][1], exception)
        what = f"rank {named} failed{how}" if len(ranks) == 1 else f"ranks {named} failed (rank {ranks[0]}{how})"
        return (
            f"error: training failed on node {node_rank} (torchrun exit code {status}): {what}; "
            f"see {logs}. Run directory: {run_dir}"
        )
    return (
        f"error: training failed on node {node_rank} (torchrun exit code {status}); "
        f"see the output above and {logs_dir(run_dir)}. Run directory: {run_dir}"
    )


AGENT_TAIL_LINES = 20


def agent_lines(lines: Sequence[str]) -> str:
    """torchrun's own last lines (not its ranks', which arrive prefixed ``[default<N>]:``), to print
    when it ended with no rank named."""
    own = [line for line in lines if route_line(line, 0)[0] is None][-AGENT_TAIL_LINES:]
    if not own:
        return ""
    return "torchrun's last lines:\n" + "".join(f"  {line.rstrip()}\n" for line in own)


class TorchrunNode:
    """One torchrun per node: it starts, restarts and stops the ranks itself; islab-train streams its
    output, passes its exit status on and, when it fails, names the rank from the error files."""

    fail_fast = False

    def __init__(self, plan: LaunchPlan, node: NodePlan) -> None:
        self.plan = plan
        self.node = node
        self.first_rank = node.node_rank * nproc_of(node.argv)
        # A folder of our own: on a shared run directory every node's torchrun would write its
        # attempts side by side, and the random names could not tell this node's from the others.
        self.log_dir = tempfile.mkdtemp(prefix="islab-torchrun-")

    def children(self) -> list[Child]:
        argv, env = tuple(self.node.argv), dict(self.node.env)
        script = worker_script(self.plan.program) if self.plan.forked_ranks else None
        # Forked ranks run the worker's file as this interpreter finds it: only where the ranks'
        # interpreter is this one (islab.plan.torchrun, "Forked ranks").
        if script is not None and os.path.abspath(argv[0]) == os.path.abspath(sys.executable):
            argv = forked_argv(argv, self.plan.program, script, self.plan.rank_imports)
            # A forked rank keeps the agent's streams; unbuffered, as torchrun's `python -u` ranks.
            env.setdefault("PYTHONUNBUFFERED", "1")
        argv = supervised_argv(argv, self.log_dir)
        return [Child(argv, ranks_env(env, nproc_of(argv)), rank=None, first_rank=self.first_rank, tail_lines=400)]

    def observe(self, rank: int | None, line: str) -> None:
        """torchrun enforces the rendezvous timeout itself."""

    def overdue(self) -> bool:
        return False

    def explain(self, outcome: Outcome, err: IO[str], *, all_ranks: bool) -> int:
        status = outcome.statuses[0]
        if status == 0:
            return 0
        run_dir = self.plan.run_dir
        lines = list(outcome.tails[0])
        if rendezvous_timed_out(lines):
            err.write(rendezvous_message(self.plan.rendezvous_address, self.plan.rendezvous_timeout_s) + "\n")
            return status
        failures = find_failures(self.log_dir, lines, run_dir, self.first_rank)
        exception = failures[0][2] if failures else None
        if failures:
            log_lines = log_tail(run_dir, failures[0][0], lines=TRACEBACK_SEARCH_LINES)
            exception = exception or last_exception_line(log_lines)
            # The rank's traceback (or last lines) first, so that the error itself is the last thing printed.
            err.write(failed_rank_lines(failures[0][0], str(rank_log(run_dir, failures[0][0])), log_lines,
                                        self.plan.overrides, shown=all_ranks,
                                        clueless=not cause_named(failures[0][1], exception)))  # fmt: skip
        else:
            # torchrun itself failed before any rank did (a store that could not listen, a bad option):
            # its own last lines are the only account of it, and the console shows no agent lines.
            err.write(agent_lines(lines))
        pairs = [(rank, code) for rank, code, _ in failures]
        err.write(failure_message(status, pairs, run_dir, self.node.node_rank, exception) + "\n")
        return status

    def close(self) -> None:
        shutil.rmtree(self.log_dir, ignore_errors=True)
