"""Run one node's launch plan and stand guard over it.

A launcher started from a terminal must behave like one program, even though it is a tree of
processes (islab-train -> torchrun -> N ranks, or islab-train -> N JAX ranks):

* **One process group per child.** Children start in a new session (``start_new_session=True``),
  so a signal can reach the whole tree with ``os.killpg`` -- including ranks a launcher started --
  and nothing is left behind. Never ``shell=True``: argv goes to ``exec`` as-is.
* **Signals are forwarded.** SIGINT/SIGTERM sent to islab-train go to every group; whatever is
  still alive after a grace period (10 s) gets SIGKILL. islab-train then exits 128 + signal
  (130 for Ctrl-C, 143 for SIGTERM), the shell convention.
* **Exit codes tell the truth.** The launcher's exit code is passed through (death by signal N
  becomes 128 + N). skrl's JAX launcher exits 0 even when a rank fails and hangs when a peer dies,
  so for skrl-JAX the ranks are started here directly, with the same ``JAX_*`` variables, polled,
  and the first failure stops the others and fails the run with a message naming the rank.
* **Failures are named.** After torchrun fails, its failure summary (``rank : 1 (local_rank: 1)``)
  or a Traceback in ``<run_dir>/logs/rank_<R>.log`` names the rank to look at.

Also here, because they touch the machine: probing a free port and counting visible GPUs without
importing torch. No torch import in this module.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from islab.plan import LaunchPlan, NodePlan, RankLaunch

DEFAULT_GRACE_S = 10.0
POLL_INTERVAL_S = 0.05
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# torchrun's failure summary: "  rank      : 1 (local_rank: 1)"
_TORCHRUN_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_TORCHRUN_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


# ----------------------------------------------------------------------------------------------
# Machine probes
# ----------------------------------------------------------------------------------------------


def find_free_port(host: str = "") -> int:
    """A TCP port the OS reports free right now (bind to port 0 and read back the choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "") -> bool:
    """Can this node listen on ``port``? (What torchrun's master / the JAX coordinator will do.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR, like the first bind of a fresh listener.
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def visible_gpu_count(
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., Any] = subprocess.run,
) -> int:
    """GPUs a rank could use, without importing torch (which would cost seconds).

    CUDA_VISIBLE_DEVICES wins when set (empty or "-1" hides every GPU; CUDA stops at the first
    invalid entry); otherwise count the lines of ``nvidia-smi -L``; no nvidia-smi means 0.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = 0
        for entry in (part.strip() for part in visible.split(",")):
            if not entry or entry.startswith("-"):
                break
            count += 1
        return count
    nvidia_smi = which("nvidia-smi")
    if nvidia_smi is None:
        return 0
    try:
        listing = run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if listing.returncode != 0:
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


# ----------------------------------------------------------------------------------------------
# Process groups and signals
# ----------------------------------------------------------------------------------------------


def exit_code_of(returncode: int) -> int:
    """Popen's returncode -> a shell exit status (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


class _ProcessGroups:
    """The children we started, each leading its own process group, and the signals we got."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.processes: list[subprocess.Popen[bytes]] = []
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def start(self, argv: Iterable[str], env: Mapping[str, str], **popen: Any) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(list(argv), env={**os.environ, **env}, start_new_session=True, **popen)
        self.processes.append(process)
        return process

    def signal_all(self, signum: int) -> None:
        for process in self.processes:
            # The group outlives its leader when grandchildren (ranks) are still running.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signum)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
        self.signal_all(signum)

    def __enter__(self) -> _ProcessGroups:
        if threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        # Nothing we started may outlive us: kill what is left of every group.
        self.signal_all(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def stop_all(self, signum: int = signal.SIGTERM) -> None:
        """Ask every group to stop, then SIGKILL whatever is still alive after the grace period."""
        self.signal_all(signum)
        self.wait_all(self.grace_s)
        if any(process.poll() is None for process in self.processes):
            self.signal_all(signal.SIGKILL)
            self.wait_all(5.0)

    def wait_all(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(process.poll() is not None for process in self.processes):
                return True
            time.sleep(POLL_INTERVAL_S)
        return all(process.poll() is not None for process in self.processes)

    def escalate_if_signalled(self, since: list[float]) -> None:
        """Called from the poll loop: after a forwarded signal, SIGKILL once the grace is over."""
        if self.received is None:
            return
        if not since:
            since.append(time.monotonic())
        elif time.monotonic() - since[0] > self.grace_s:
            self.signal_all(signal.SIGKILL)


def _pump(pipe: IO[bytes], sink: IO[str], prefix: str, tail: deque[str]) -> None:
    """Copy a child's output line by line to our stream, keeping the last lines for messages."""
    for raw in iter(pipe.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        tail.append(line.rstrip("\n"))
        sink.write(prefix + line)
        sink.flush()
    pipe.close()


def _start_pump(pipe: IO[bytes] | None, sink: IO[str], prefix: str, tail: deque[str]) -> threading.Thread:
    thread = threading.Thread(target=_pump, args=(pipe, sink, prefix, tail), daemon=True)
    thread.start()
    return thread


# ----------------------------------------------------------------------------------------------
# Running a plan
# ----------------------------------------------------------------------------------------------


def run_plan(
    plan: LaunchPlan,
    node_rank: int,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run ``node_rank``'s part of ``plan`` to the end; return the exit status for islab-train."""
    node = plan.node(node_rank)
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if node.ranks:
        return _run_ranks(node, plan.run_dir, grace_s, out, err)
    return _run_launcher(node, plan.run_dir, grace_s, out, err)


def _run_launcher(node: NodePlan, run_dir: str, grace_s: float, out: IO[str], err: IO[str]) -> int:
    """torchrun (or any single launcher command): stream it, forward signals, pass its status on."""
    tail: deque[str] = deque(maxlen=400)
    signalled_at: list[float] = []
    with _ProcessGroups(grace_s) as groups:
        process = groups.start(node.argv, node.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        pumps = [
            _start_pump(process.stdout, out, "", tail),
            _start_pump(process.stderr, err, "", tail),
        ]
        while process.poll() is None:
            groups.escalate_if_signalled(signalled_at)
            time.sleep(POLL_INTERVAL_S)
        for pump in pumps:
            pump.join(timeout=5)
    if groups.received is not None:
        err.write(f"islab-train: stopped by signal {groups.received}; run directory: {run_dir}\n")
        return 128 + groups.received
    status = exit_code_of(process.returncode)
    if status != 0:
        err.write(_torchrun_failure_message(status, list(tail), run_dir, node.node_rank) + "\n")
    return status


def failed_ranks_from_output(lines: Iterable[str]) -> list[int]:
    """Global ranks named in torchrun's failure summary: the root cause first, then other ranks
    that failed on their own. Ranks torchrun itself stopped (exit code < 0, e.g. SIGTERM after a
    peer failed) are collateral and only reported when nothing else is."""
    root: list[int] = []
    own: list[int] = []
    stopped: list[int] = []
    in_root_cause = False
    pending: int | None = None
    for line in lines:
        if "Root Cause" in line:
            in_root_cause = True
        match = _TORCHRUN_FAILED_RANK.match(line)
        if match:
            pending = int(match.group(1))
            continue
        exit_match = _TORCHRUN_EXITCODE.match(line)
        if exit_match and pending is not None:
            target = root if in_root_cause else (stopped if int(exit_match.group(1)) < 0 else own)
            target.append(pending)
            pending = None
    ordered = root + own or stopped
    return list(dict.fromkeys(ordered))


def failed_ranks_from_logs(run_dir: str) -> list[int]:
    """Ranks whose ``<run_dir>/logs/rank_<R>.log`` contains a Python traceback."""
    ranks = []
    for log in sorted(Path(run_dir, "logs").glob("rank_*.log")):
        match = re.fullmatch(r"rank_(\d+)\.log", log.name)
        if not match:
            continue
        with contextlib.suppress(OSError):
            if "Traceback (most recent call last)" in log.read_text(encoding="utf-8", errors="replace"):
                ranks.append(int(match.group(1)))
    return sorted(ranks)


def _torchrun_failure_message(status: int, tail: list[str], run_dir: str, node_rank: int) -> str:
    ranks = failed_ranks_from_output(tail) or failed_ranks_from_logs(run_dir)
    if ranks:
        logs = ", ".join(str(Path(run_dir, "logs", f"rank_{rank}.log")) for rank in ranks)
        named = ", ".join(str(rank) for rank in ranks)
        what = f"rank {named} failed" if len(ranks) == 1 else f"ranks {named} failed"
        return (
            f"error: training failed on node {node_rank} (torchrun exit code {status}): {what}; "
            f"see {logs}. Run directory: {run_dir}"
        )
    return (
        f"error: training failed on node {node_rank} (torchrun exit code {status}); "
        f"see the output above and {Path(run_dir, 'logs')}. Run directory: {run_dir}"
    )


def _run_ranks(node: NodePlan, run_dir: str, grace_s: float, out: IO[str], err: IO[str]) -> int:
    """skrl-JAX: start the ranks ourselves, and fail fast and loudly when one of them fails."""
    tails: dict[int, deque[str]] = {rank.global_rank: deque(maxlen=20) for rank in node.ranks}
    signalled_at: list[float] = []
    failed: tuple[RankLaunch, int] | None = None
    with _ProcessGroups(grace_s) as groups:
        running: list[tuple[RankLaunch, subprocess.Popen[bytes]]] = []
        pumps = []
        for rank in node.ranks:
            process = groups.start(rank.argv, rank.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            running.append((rank, process))
            pumps.append(_start_pump(process.stdout, out, f"[rank {rank.global_rank}] ", tails[rank.global_rank]))
        # Poll every rank each round (a short-circuiting any() would never see a later rank die).
        while [process.poll() for _, process in running].count(None):
            groups.escalate_if_signalled(signalled_at)
            if groups.received is None and failed is None:
                for rank, process in running:
                    if process.returncode not in (None, 0):
                        failed = (rank, exit_code_of(process.returncode))
                        # Peers of a dead JAX rank block forever in collectives: stop them now.
                        groups.stop_all(signal.SIGTERM)
                        break
            time.sleep(POLL_INTERVAL_S)
        if failed is None and groups.received is None:
            for rank, process in running:
                if process.returncode != 0:
                    failed = (rank, exit_code_of(process.returncode))
                    break
        for pump in pumps:
            pump.join(timeout=5)
    if groups.received is not None:
        err.write(f"islab-train: stopped by signal {groups.received}; run directory: {run_dir}\n")
        return 128 + groups.received
    if failed is None:
        return 0
    rank, status = failed
    log = Path(run_dir, "logs", f"rank_{rank.global_rank}.log")
    last_lines = "\n".join(f"    {line}" for line in tails[rank.global_rank])
    err.write(
        f"error: rank {rank.global_rank} (node {node.node_rank}, local rank {rank.local_rank}) "
        f"exited with code {status}; the other ranks were stopped. See {log}. "
        f"Run directory: {run_dir}\n"
    )
    if last_lines:
        err.write(f"  last output of rank {rank.global_rank}:\n{last_lines}\n")
    return status


# ----------------------------------------------------------------------------------------------
# The run record
# ----------------------------------------------------------------------------------------------


def write_launch_record(run_dir: str, record: Mapping[str, Any]) -> Path:
    """Create the run directory and write ``launch.yaml`` (the resolved spec and its sources)."""
    import yaml  # lazy: only a real launch pays for it

    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    target = path / "launch.yaml"
    target.write_text(yaml.safe_dump(dict(record), sort_keys=False), encoding="utf-8")
    return target
