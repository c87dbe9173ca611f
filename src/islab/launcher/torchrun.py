"""torchrun: the command that starts a node's ranks (rl_games, rsl_rl, skrl-torch), and reading its failures.

**The command.** ``python -m torch.distributed.run`` with the node layout and the rendezvous
(:func:`node_argv`), then ``-m islab.worker`` and the worker's arguments. With the *static*
rendezvous node 0 listens on ``--master_addr:--master_port`` and every node is told its
``--node_rank``; ``--rdzv_conf timeout=`` bounds how long node 0's store waits for the others.
With *c10d* the nodes meet at ``--rdzv_endpoint`` under ``--rdzv_id``, torchrun assigns the node
ranks itself, and ``join_timeout=`` bounds the wait. :func:`with_c10d_node_facts` adds what only
the launching node knows (``is_host=1``, ``--local_addr``).

**At launch** (:func:`supervised_argv`, not shown by ``--dry-run``): ``--tee 3`` makes every line
of a rank arrive prefixed ``[default<local_rank>]:`` so the console can attribute it, and
``--log-dir`` points torchrun's per-rank directories at a folder of the supervisor's own.

**Failures.** The worker's ``main`` is wrapped in torch's ``@record``: a rank that raises writes
``{"message": {"message": "RuntimeError: boom", "extraInfo": {"timestamp": ...}}}`` to the file
named by ``TORCHELASTIC_ERROR_FILE``, which torchrun sets per rank to
``<log-dir>/<run_id>_<random>/attempt_<restart>/<local_rank>/error.json``
(``torch.distributed.elastic.multiprocessing.api.DefaultLogsSpecs.reify``). Those files name the
failed ranks and their exception (:func:`error_file_failures`). A rank killed by a signal writes
none, so torchrun's console failure summary (``rank : 1 (local_rank: 1)`` / ``exitcode : -9``) is
read as the fallback (:func:`torchrun_failures`), then tracebacks in the rank logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

from islab.launcher.console import route_line
from islab.launcher.failures import (
    describe_end,
    failed_ranks_from_logs,
    last_exception_line,
    log_tail,
    lost_peer,
    rendezvous_message,
)
from islab.launcher.processes import Child, Outcome
from islab.rundir import logs_dir, rank_log

if TYPE_CHECKING:
    from islab.launcher.plan import LaunchPlan, NodePlan
    from islab.launcher.spec import RunSpec

NAME = "torchrun"
WORKER_MODULE = "islab.worker"
# torchrun's failure summary: "  rank      : 1 (local_rank: 1)"
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
# Lines of torchrun's *own* output (not a rank's) that mean the nodes never all arrived:
# c10d: "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError";
# static, node 0: "DistStoreError: Timed out after 6 seconds waiting for clients. 1/2 clients joined."
_RENDEZVOUS_TIMEOUT = re.compile(r"RendezvousTimeoutError|waiting for clients|Dist(Store|Network)Error:.*[Tt]imed out")


# ----------------------------------------------------------------------------------------------
# The command (pure)
# ----------------------------------------------------------------------------------------------


def node_argv(spec: RunSpec, node_rank: int, derived: Mapping[str, str], worker: Sequence[str]) -> tuple[str, ...]:
    argv = [
        spec.python, "-m", "torch.distributed.run",
        "--nproc_per_node", str(spec.nproc_per_node),
        "--nnodes", spec.nnodes_text,
    ]  # fmt: skip
    timeout = spec.rendezvous.timeout_s  # None: torchrun's own default, so no rdzv_conf entry
    if spec.rendezvous.backend == "c10d":
        # c10d: join_timeout bounds the wait for the rendezvous to complete (torchrun default 600 s);
        # last_call_timeout, the wait for more nodes once the minimum has joined (default 30 s).
        conf = [f"join_timeout={timeout}"] if timeout is not None else []
        if spec.rendezvous.last_call_s is not None:
            conf.append(f"last_call_timeout={spec.rendezvous.last_call_s}")
        argv += [
            "--rdzv_backend", "c10d",
            "--rdzv_endpoint", derived["rendezvous.endpoint"],
            "--rdzv_id", derived["rendezvous.id"],
            *(["--rdzv_conf", ",".join(conf)] if conf else []),
        ]  # fmt: skip
    else:
        # static: "timeout" is the TCPStore's timeout, i.e. how long node 0's store waits for the
        # other nodes' agents to connect (static_tcp_rendezvous.py; torchrun default 900 s).
        argv += [
            "--node_rank", str(node_rank),
            "--master_addr", derived["rendezvous.master_addr"],
            "--master_port", derived["rendezvous.master_port"],
            *(["--rdzv_conf", f"timeout={timeout}"] if timeout is not None else []),
        ]  # fmt: skip
    argv += ["--max_restarts", str(spec.max_restarts)]
    if spec.entrypoint is not None:  # the user's entry point: `worker` is plan.entry_argv's PATH/-m/--no-python ...
        return (*argv, *worker)
    return (*argv, "-m", WORKER_MODULE, *worker)


def with_c10d_node_facts(
    plan: LaunchPlan, node_rank: int, *, hosts_store: bool, local_addr: str | None = None
) -> LaunchPlan:
    """``plan`` with what only the launching node knows added to its c10d torchrun command.

    torchrun guesses two things from the machine's host name, and both guesses miss an address on
    a second network card (a cluster fabric, a network namespace), making nodes wait until they
    time out:

    * which node hosts the c10d store: the one whose host name or name-resolved addresses match
      the endpoint -- ``hosts_store`` (this node can bind the endpoint's address) adds
      ``is_host=1`` to ``--rdzv_conf``;
    * the address the ranks use to reach the group's rank-0 node (``MASTER_ADDR``), by default
      ``socket.getfqdn()`` -- ``local_addr`` (this node's address on the route to the endpoint)
      becomes ``--local_addr``.

    Plans that are not c10d are returned unchanged."""
    node = plan.node(node_rank)
    argv = list(node.argv)
    if "--rdzv_backend" not in argv or "c10d" not in argv:
        return plan
    if hosts_store and "--rdzv_conf" not in argv:  # torchrun's default timeouts: no conf yet
        at = argv.index("--rdzv_id") + 2
        argv[at:at] = ["--rdzv_conf", "is_host=1"]
    index = argv.index("--rdzv_conf") + 1 if "--rdzv_conf" in argv else argv.index("--rdzv_id") + 1
    if hosts_store and "is_host=" not in argv[index]:
        argv[index] = f"{argv[index]},is_host=1"
    if local_addr is not None and "--local_addr" not in argv:
        argv[index + 1 : index + 1] = ["--local_addr", local_addr]
    nodes = tuple(replace(item, argv=tuple(argv)) if item.node_rank == node_rank else item for item in plan.nodes)
    return replace(plan, nodes=nodes)


def supervised_argv(argv: Sequence[str], log_dir: str | None = None) -> tuple[str, ...]:
    """torchrun's argv with ``--tee 3`` (each worker line arrives as ``[default<L>]:…``) and, given
    ``log_dir``, ``--log-dir`` (where torchrun tells each rank to write its error file). Options
    already present are kept; any other command is returned unchanged."""
    argv = tuple(argv)
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == "torch.distributed.run":
            added: list[str] = []
            if "--tee" not in argv and "-t" not in argv:
                added += ["--tee", "3"]
            if log_dir is not None and not {"--log-dir", "--log_dir"} & set(argv):
                added += ["--log-dir", log_dir]
            return (*argv[: index + 2], *added, *argv[index + 2 :])
    return argv


def nproc_of(argv: Sequence[str]) -> int:
    """``--nproc_per_node N`` of a torchrun argv (1 when absent or not a number)."""
    argv = list(argv)
    with contextlib.suppress(ValueError, IndexError):
        return int(argv[argv.index("--nproc_per_node") + 1])
    return 1


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
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            local_rank = int(path.parent.name)
        except (OSError, ValueError):
            continue
        message = data.get("message") if isinstance(data, dict) else None
        if isinstance(message, dict):
            text = str(message.get("message", ""))
            stamp = message.get("extraInfo", {}).get("timestamp", 0)
        else:
            text, stamp = str(message or ""), data.get("timestamp", 0) if isinstance(data, dict) else 0
        with contextlib.suppress(ValueError, TypeError):
            found.append((int(stamp), local_rank, text.strip().splitlines()[0] if text.strip() else ""))
    # A rank that only lost its peer (gloo's "Connection closed by peer") is a consequence, never the
    # root cause; error-file timestamps are whole seconds, so the ranks often tie on them.
    found.sort(key=lambda item: (lost_peer(item[2]), item[0], item[1]))
    return [(local_rank, text) for _, local_rank, text in found]


def torchrun_failures(lines: Iterable[str]) -> list[tuple[int, int]]:
    """(global rank, exit code) from torchrun's console failure summary: the root cause first, then
    other ranks that failed on their own. Ranks torchrun itself stopped (exit code < 0, e.g. SIGTERM
    after a peer failed) are collateral and only reported when nothing else is."""
    entries = _summary(lines)
    chosen = [entry for entry in entries if not entry.stopped] or entries
    return [(entry.rank, entry.code) for entry in chosen]


class _Ended(NamedTuple):
    """One rank in torchrun's failure summary."""

    rank: int
    local_rank: int
    code: int
    root: bool  # torchrun's "Root Cause (first observed failure)"
    stopped: bool  # ended by a signal outside the root cause: most likely torchrun stopping it


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
            entries.append(_Ended(*pending, code, in_root_cause, not in_root_cause and code < 0))
            pending = None
    entries.sort(key=lambda entry: not entry.root)
    seen: dict[int, _Ended] = {}
    for entry in entries:
        seen.setdefault(entry.rank, entry)
    return list(seen.values())


def failed_ranks_from_output(lines: Iterable[str]) -> list[int]:
    """Global ranks named in torchrun's failure summary (see :func:`torchrun_failures`)."""
    return [rank for rank, _ in torchrun_failures(lines)]


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


# ----------------------------------------------------------------------------------------------
# Supervising it (see islab.launcher.supervise for the loop)
# ----------------------------------------------------------------------------------------------


def ranks_env(env: Mapping[str, str], nproc: int, cores: int | None = None) -> dict[str, str]:
    """The node's env plus ``OMP_NUM_THREADS``: the ranks on a node share its cores, ``cores // N``
    each (what islab.worker.context.cpu_threads_per_rank gives torch). Setting it ourselves also
    stops torchrun's "Setting OMP_NUM_THREADS ... to 1" banner on every run; a value the user set
    (in the spec's env or the shell) wins."""
    if "OMP_NUM_THREADS" in env or "OMP_NUM_THREADS" in os.environ:
        return dict(env)
    cores = (os.cpu_count() or 1) if cores is None else cores
    return {**env, "OMP_NUM_THREADS": str(max(1, cores // max(1, nproc)))}


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
        argv = supervised_argv(self.node.argv, self.log_dir)
        return [
            Child(argv, ranks_env(self.node.env, nproc_of(argv)), rank=None, first_rank=self.first_rank, tail_lines=400)
        ]

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
            err.write(rendezvous_message(self.plan) + "\n")
            return status
        failures = find_failures(self.log_dir, lines, run_dir, self.first_rank)
        exception = failures[0][2] if failures else None
        if failures:
            log_lines = log_tail(run_dir, failures[0][0], lines=200)
            exception = exception or last_exception_line(log_lines)
            if not all_ranks and log_lines:
                # The log's last lines first, so that the error itself is the last thing printed.
                err.write(f"  last lines of {rank_log(run_dir, failures[0][0])}:\n")
                err.write("".join(f"    {line}\n" for line in log_lines[-15:]))
        pairs = [(rank, code) for rank, code, _ in failures]
        err.write(failure_message(status, pairs, run_dir, self.node.node_rank, exception) + "\n")
        return status

    def close(self) -> None:
        shutil.rmtree(self.log_dir, ignore_errors=True)
