"""Run one node's launch plan and stand guard over it.

A launcher started from a terminal must behave like one program, even though it is a tree of
processes (islab-train -> torchrun -> N ranks, or islab-train -> N JAX ranks):

* **One process group per child.** Children start in a new session (``start_new_session=True``),
  so a signal can reach the whole tree with ``os.killpg`` -- including ranks a launcher started --
  and nothing is left behind. Never ``shell=True``: argv goes to ``exec`` as-is.
* **Signals are forwarded.** SIGINT/SIGTERM sent to islab-train go to every group, and SIGTERM
  to every rank; whatever is still alive after a grace period (5 s) gets SIGKILL, so 10 s after
  the signal nothing of the job is left. torchrun starts each rank in a session of its own, out of
  reach of ``killpg(torchrun)``, so the process tree below our children is read from ``/proc``
  while the job runs (:func:`process_tree`) and those processes are signalled too. islab-train
  then exits 128 + signal (130 for Ctrl-C, 143 for SIGTERM), the shell convention.
* **Exit codes tell the truth.** The launcher's exit code is passed through (death by signal N
  becomes 128 + N). skrl's JAX launcher exits 0 even when a rank fails and hangs when a peer dies,
  so for skrl-JAX the ranks are started here directly, with the same ``JAX_*`` variables, polled,
  and the first failure stops the others and fails the run with a message naming the rank.
* **Failures are named.** After torchrun fails, its failure summary (``rank : 1 (local_rank: 1)``)
  or a Traceback in ``<run_dir>/logs/rank_<R>.log`` names the rank to look at; the last lines of
  that rank's log are printed, then one ``error:`` line with the node, the rank, the last line of
  its traceback (or the signal that killed it) and the log file.
* **Rendezvous failures are named too.** Nodes that do not all arrive within
  ``rendezvous.timeout_s`` end the run with one message naming the timeout and the address
  (:func:`rendezvous_message`): torchrun says so in its own output; for skrl-JAX, whose
  ``jax.distributed.initialize`` is called by skrl without a timeout, :class:`JaxRendezvousWatch`
  enforces it.
* **The console is ours.** torchrun runs with ``--tee 3`` so every line of a rank arrives
  prefixed ``[default<local_rank>]:`` and can be attributed; by default only rank 0's stderr
  passes (``--all-ranks``: everything, prefixed ``[rank R]``), the ranks' full output being in
  their log files. On the node that hosts rank 0 a :class:`~islab.display.RunView` draws the
  progress from ``<run_dir>/progress.jsonl`` and, after a successful run, the summary table and
  ``curves.png``.

Also here, because they touch the machine: probing a free port and counting visible GPUs without
importing torch. No torch import in this module.
"""

from __future__ import annotations

import contextlib
import functools
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from islab.display import ConsolePolicy, RunView, Stream, finish, rank_prefix, resume_command, route_line
from islab.plan import LaunchPlan, NodePlan, RankLaunch

# SIGKILL what is left this long after a forwarded SIGINT/SIGTERM, so that nothing of the job
# is alive 10 s after the signal even when a process ignores SIGTERM.
DEFAULT_GRACE_S = 5.0
POLL_INTERVAL_S = 0.05
TICK_INTERVAL_S = 0.25  # how often the progress display re-reads progress.jsonl
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


def local_address_towards(host: str, port: int) -> str | None:
    """This machine's address on the route to ``host`` -- what the other nodes can reach it at.
    A UDP "connect" sends nothing; it only asks the kernel to pick the route and source address."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_UDP)
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            return str(sock.getsockname()[0])
    except (OSError, IndexError):
        return None


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


def process_tree(roots: Iterable[int], proc: Path = Path("/proc")) -> dict[int, int]:
    """Every descendant of ``roots`` (not the roots themselves) as ``{pid: start time}``, read from
    ``/proc/<pid>/stat``. The start time tells a live process from a later one that reused its pid.
    Empty where there is no ``/proc`` (supervision is Linux-only anyway)."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    try:
        entries = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return {}
    for entry in entries:
        stat = _read_stat(int(entry), proc)
        if stat is not None:
            ppid, start = stat
            children.setdefault(ppid, []).append(int(entry))
            started[int(entry)] = start
    found: dict[int, int] = {}
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found[child] = started[child]
                todo.append(child)
    return found


def _read_stat(pid: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live, non-zombie process, else None."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may contain spaces and parentheses, so split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in {"Z", "X"}:
        return None
    return int(fields[1]), int(fields[19])


class _ProcessGroups:
    """The children we started, each leading its own process group, and the signals we got.

    torchrun starts every rank in a session of its own, so ``killpg`` of torchrun's group does not
    reach the ranks. Every process below our children is therefore remembered while the job runs
    (:meth:`track`, called from the poll loops and right before any signal is sent), and stopping
    the job signals those too: nothing of the job outlives islab-train's exit, even when torchrun
    itself has to be SIGKILLed.
    """

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.processes: list[subprocess.Popen[bytes]] = []
        self.received: int | None = None
        self.tracked: dict[int, int] = {}  # pid -> start time, every descendant seen so far
        self._previous: dict[int, Any] = {}

    def start(self, argv: Iterable[str], env: Mapping[str, str], **popen: Any) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(list(argv), env={**os.environ, **env}, start_new_session=True, **popen)
        self.processes.append(process)
        return process

    def track(self) -> None:
        """Remember the descendants of our children that are alive now."""
        live = [process.pid for process in self.processes if process.returncode is None]
        if live:
            self.tracked.update(process_tree(live))

    def signal_all(self, signum: int, descendants: int | None = None) -> None:
        """``signum`` to every child's group; ``descendants`` (default: the same signal) to every
        remembered descendant still alive -- to its group where it leads one (a torchrun rank)."""
        self.track()
        for process in self.processes:
            # The group outlives its leader when grandchildren (ranks) are still running.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signum)
        for pid, start in list(self.tracked.items()):
            stat = _read_stat(pid)
            if stat is None or stat[1] != start:
                del self.tracked[pid]  # gone (or its pid now belongs to someone else)
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signum if descendants is None else descendants)
                else:
                    os.kill(pid, signum if descendants is None else descendants)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
        # The launcher gets the signal itself (torchrun shuts its workers down); the ranks get
        # SIGTERM, whose default action ends them even inside a C++ collective, where a Python
        # KeyboardInterrupt would wait for the call to return.
        self.signal_all(signum, descendants=signal.SIGTERM)

    def __enter__(self) -> _ProcessGroups:
        if threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        # Nothing we started may outlive us: kill what is left of every group and every rank.
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


@dataclass(frozen=True)
class ConsoleOptions:
    """How a run looks on the console (see :mod:`islab.display`).

    The defaults (everything shown, no progress display) suit tests and embedding; the command
    line asks for ``all_ranks=False`` and a progress display on the node that hosts rank 0."""

    all_ranks: bool = True
    progress: bool = False  # read progress.jsonl: live display or plain lines, summary at the end
    live: bool = False  # Rich live display (a terminal) instead of plain lines
    interval_s: float = 10.0  # plain lines: at most one per interval
    note: str = ""  # shown in the live display's title
    argv: tuple[str, ...] | None = None  # islab-train's own arguments, for the resume hint


def with_tee(argv: Sequence[str]) -> tuple[str, ...]:
    """torchrun's argv with ``--tee 3`` added, so each worker line arrives as ``[default<L>]:…``.
    Any other command is returned unchanged."""
    argv = tuple(argv)
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == "torch.distributed.run":
            if "--tee" in argv or "-t" in argv:
                return argv
            return (*argv[: index + 2], "--tee", "3", *argv[index + 2 :])
    return argv


def _pump(
    pipe: IO[bytes],
    sink: IO[str],
    stream: Stream,
    tail: deque[str],
    view: RunView,
    policy: ConsolePolicy,
    rank: int | None,
    first_rank: int | None,
    on_line: Callable[[str], None] | None = None,
) -> None:
    """Copy a child's output line by line to the console, as the policy allows, keeping the last
    lines for messages. ``rank``: the child is that rank; ``first_rank``: the child is torchrun
    and its worker lines carry a local-rank prefix (global rank = first_rank + local rank)."""
    for raw in iter(pipe.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        tail.append(line.rstrip("\n"))
        if on_line is not None:
            on_line(line)
        line_rank, text = (rank, line) if first_rank is None else route_line(line, first_rank)
        if policy.shows(line_rank, stream):
            view.emit(rank_prefix(line_rank) + text, sink)
    pipe.close()


def _start_pump(pipe: IO[bytes] | None, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=_pump, args=(pipe, *args), daemon=True)
    thread.start()
    return thread


def log_tail(run_dir: str, rank: int, lines: int = 15) -> list[str]:
    """The last lines of ``<run_dir>/logs/rank_<rank>.log`` (empty when it does not exist)."""
    try:
        text = Path(run_dir, "logs", f"rank_{rank}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.rstrip("\n").splitlines()[-lines:]


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
    console: ConsoleOptions | None = None,
) -> int:
    """Run ``node_rank``'s part of ``plan`` to the end; return the exit status for islab-train."""
    node = plan.node(node_rank)
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    options = console or ConsoleOptions()
    view = RunView(
        plan.run_dir, out, live=options.live, progress=options.progress, note=options.note,
        interval_s=options.interval_s,
    )  # fmt: skip
    try:
        if node.ranks:
            status = _run_ranks(plan, node, grace_s, out, err, view, options)
        else:
            status = _run_launcher(plan, node, grace_s, out, err, view, options)
    finally:
        view.close()
    if status == 0 and options.progress:
        resume = resume_command(options.argv, plan.run_dir) if options.argv is not None else None
        finish(plan.run_dir, out, tty=options.live, resume=resume, records=view.records)
    return status


# ----------------------------------------------------------------------------------------------
# Reading failures (pure)
# ----------------------------------------------------------------------------------------------

# Lines of torchrun's *own* output (not a rank's) that mean the nodes never all arrived:
# c10d: "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError";
# static, node 0: "DistStoreError: Timed out after 6 seconds waiting for clients. 1/2 clients joined."
_RENDEZVOUS_TIMEOUT = re.compile(r"RendezvousTimeoutError|waiting for clients|Dist(Store|Network)Error:.*[Tt]imed out")


_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


def rendezvous_timed_out(lines: Iterable[str]) -> bool:
    """Did torchrun's agent give up waiting for the other nodes? Only torchrun's own lines count:
    a rank's line (prefixed ``[default<L>]:`` by ``--tee``) is a training failure, not a rendezvous."""
    return any(_RENDEZVOUS_TIMEOUT.search(line) for line in lines if route_line(line, 0)[0] is None)


def rendezvous_message(plan: LaunchPlan) -> str:
    """The one-line error for nodes that did not arrive in time."""
    where = plan.rendezvous_address or "the rendezvous address"
    return (
        f"error: rendezvous: node(s) did not join within {plan.rendezvous_timeout_s} s at {where}; "
        f"check that every node runs islab-train with the same spec and can reach {where} (islab-train doctor)"
    )


def last_exception_line(lines: Sequence[str]) -> str | None:
    """The last line of the last Python traceback in ``lines`` (``RuntimeError: boom``), or None.

    That is the first line after ``Traceback (most recent call last):`` that is not indented
    (frames and source lines are); ``[default<L>]:`` prefixes from ``torchrun --tee`` and the
    ``[rank<R>]:`` prefixes torch puts on a failed collective's traceback are removed."""
    text = [_RANK_PREFIX.sub("", route_line(line, 0)[1].rstrip("\n"), count=1) for line in lines]
    starts = [index for index, line in enumerate(text) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    for line in text[starts[-1] + 1 :]:
        if line.strip() and not line[0].isspace():
            return line.strip()
    return None


def torchrun_failures(lines: Iterable[str]) -> list[tuple[int, int]]:
    """(global rank, exit code) from torchrun's failure summary: the root cause first, then other
    ranks that failed on their own. Ranks torchrun itself stopped (exit code < 0, e.g. SIGTERM after
    a peer failed) are collateral and only reported when nothing else is."""
    root: list[tuple[int, int]] = []
    own: list[tuple[int, int]] = []
    stopped: list[tuple[int, int]] = []
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
            code = int(exit_match.group(1))
            target = root if in_root_cause else (stopped if code < 0 else own)
            target.append((pending, code))
            pending = None
    seen: dict[int, int] = {}
    for rank, code in root + own or stopped:
        seen.setdefault(rank, code)
    return list(seen.items())


def failed_ranks_from_output(lines: Iterable[str]) -> list[int]:
    """Global ranks named in torchrun's failure summary (see :func:`torchrun_failures`)."""
    return [rank for rank, _ in torchrun_failures(lines)]


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


def describe_end(exit_code: int | None, exception: str | None) -> str:
    """How a rank ended, for the error line: its exception, or the signal that killed it."""
    if exception:
        return f" with {exception}"
    if exit_code is not None and exit_code < 0:
        return f", killed by {_signal_name(-exit_code)}"
    if exit_code is not None and exit_code > 128:
        return f" (exit code {exit_code}, signal {_signal_name(exit_code - 128)}?)"
    return ""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _torchrun_failure_message(
    status: int, failures: Sequence[tuple[int, int | None]], run_dir: str, node_rank: int, exception: str | None
) -> str:
    if failures:
        ranks = [rank for rank, _ in failures]
        logs = ", ".join(str(Path(run_dir, "logs", f"rank_{rank}.log")) for rank in ranks)
        named = ", ".join(str(rank) for rank in ranks)
        how = describe_end(failures[0][1], exception)
        what = f"rank {named} failed{how}" if len(ranks) == 1 else f"ranks {named} failed (rank {ranks[0]}{how})"
        return (
            f"error: training failed on node {node_rank} (torchrun exit code {status}): {what}; "
            f"see {logs}. Run directory: {run_dir}"
        )
    return (
        f"error: training failed on node {node_rank} (torchrun exit code {status}); "
        f"see the output above and {Path(run_dir, 'logs')}. Run directory: {run_dir}"
    )


# ----------------------------------------------------------------------------------------------
# torchrun
# ----------------------------------------------------------------------------------------------


def _run_launcher(
    plan: LaunchPlan,
    node: NodePlan,
    grace_s: float,
    out: IO[str],
    err: IO[str],
    view: RunView,
    options: ConsoleOptions,
) -> int:
    """torchrun (or any single launcher command): stream it, forward signals, pass its status on."""
    run_dir = plan.run_dir
    tail: deque[str] = deque(maxlen=400)
    signalled_at: list[float] = []
    policy = ConsolePolicy(all_ranks=options.all_ranks)
    first_rank = node.node_rank * _nproc_of(node.argv)
    with _ProcessGroups(grace_s) as groups:
        process = groups.start(with_tee(node.argv), node.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        pumps = [
            _start_pump(process.stdout, out, "out", tail, view, policy, None, first_rank),
            _start_pump(process.stderr, err, "err", tail, view, policy, None, first_rank),
        ]
        last_tick = 0.0
        while process.poll() is None:
            groups.escalate_if_signalled(signalled_at)
            if time.monotonic() - last_tick >= TICK_INTERVAL_S:
                view.tick()
                groups.track()
                last_tick = time.monotonic()
            time.sleep(POLL_INTERVAL_S)
        for pump in pumps:
            pump.join(timeout=5)
    view.close()
    if groups.received is not None:
        err.write(f"islab-train: stopped by signal {groups.received}; run directory: {run_dir}\n")
        return 128 + groups.received
    status = exit_code_of(process.returncode)
    if status == 0:
        return 0
    lines = list(tail)
    if rendezvous_timed_out(lines):
        err.write(rendezvous_message(plan) + "\n")
        return status
    failures: list[tuple[int, int | None]] = list(torchrun_failures(lines))
    if not failures:
        failures = [(rank, None) for rank in failed_ranks_from_logs(run_dir)]
    exception = None
    if failures:
        log_lines = log_tail(run_dir, failures[0][0], lines=200)
        exception = last_exception_line(log_lines)
        if not options.all_ranks and log_lines:
            # The log's last lines first, so that the error itself is the last thing printed.
            err.write(f"  last lines of {Path(run_dir, 'logs', f'rank_{failures[0][0]}.log')}:\n")
            err.write("".join(f"    {line}\n" for line in log_lines[-15:]))
    err.write(_torchrun_failure_message(status, failures, run_dir, node.node_rank, exception) + "\n")
    return status


def _nproc_of(argv: Sequence[str]) -> int:
    """``--nproc_per_node N`` of a torchrun argv (1 when absent or not a number)."""
    argv = list(argv)
    with contextlib.suppress(ValueError, IndexError):
        return int(argv[argv.index("--nproc_per_node") + 1])
    return 1


# ----------------------------------------------------------------------------------------------
# skrl-JAX: the ranks, supervised directly
# ----------------------------------------------------------------------------------------------

# skrl logs these around its jax.distributed.initialize call (skrl/__init__.py, skrl 2.1.x): the
# first just before it, one of the others right after it returns.
JAX_JOINING = "[skrl:INFO] Distributed (rank:"
JAX_JOINED = ("Using device local to process", "Failed to get the device local to process")


class JaxRendezvousWatch:
    """When did each rank start waiting in ``jax.distributed.initialize``, and has it returned?

    ``jax.distributed.initialize`` waits up to 300 s for every process and skrl calls it at import
    without a timeout argument, so the supervisor enforces ``rendezvous.timeout_s`` itself: a rank
    that logged :data:`JAX_JOINING` but none of :data:`JAX_JOINED` within the timeout means a node
    did not arrive. Fed line by line from the output pumps (other threads); read by the poll loop.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.waiting_since: dict[int, float] = {}
        self.joined: set[int] = set()

    def observe(self, rank: int, line: str) -> None:
        if rank in self.joined:
            return
        if JAX_JOINING in line:
            self.waiting_since.setdefault(rank, self.clock())
        elif any(marker in line for marker in JAX_JOINED):
            self.joined.add(rank)

    def waiting(self, rank: int) -> bool:
        return rank in self.waiting_since and rank not in self.joined

    def timed_out(self, timeout_s: float) -> int | None:
        """A rank that has waited longer than ``timeout_s``, or None."""
        now = self.clock()
        for rank, since in list(self.waiting_since.items()):
            if rank not in self.joined and now - since > timeout_s:
                return rank
        return None


def _run_ranks(
    plan: LaunchPlan,
    node: NodePlan,
    grace_s: float,
    out: IO[str],
    err: IO[str],
    view: RunView,
    options: ConsoleOptions,
) -> int:
    """skrl-JAX: start the ranks ourselves, and fail fast and loudly when one of them fails."""
    run_dir = plan.run_dir
    tails: dict[int, deque[str]] = {rank.global_rank: deque(maxlen=200) for rank in node.ranks}
    signalled_at: list[float] = []
    failed: tuple[RankLaunch, int] | None = None
    rendezvous_failed = False
    watch = JaxRendezvousWatch()
    policy = ConsolePolicy(all_ranks=options.all_ranks)
    with _ProcessGroups(grace_s) as groups:
        running: list[tuple[RankLaunch, subprocess.Popen[bytes]]] = []
        pumps = []
        for rank in node.ranks:
            process = groups.start(rank.argv, rank.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            running.append((rank, process))
            tail = tails[rank.global_rank]
            observe = functools.partial(watch.observe, rank.global_rank)
            pumps.append(_start_pump(process.stdout, out, "out", tail, view, policy, rank.global_rank, None, observe))
            pumps.append(_start_pump(process.stderr, out, "err", tail, view, policy, rank.global_rank, None, observe))
        # Poll every rank each round (a short-circuiting any() would never see a later rank die).
        last_tick = 0.0
        while [process.poll() for _, process in running].count(None):
            groups.escalate_if_signalled(signalled_at)
            if time.monotonic() - last_tick >= TICK_INTERVAL_S:
                view.tick()
                groups.track()
                last_tick = time.monotonic()
            if groups.received is None and failed is None and not rendezvous_failed:
                for rank, process in running:
                    if process.returncode not in (None, 0):
                        failed = (rank, exit_code_of(process.returncode))
                        rendezvous_failed = watch.waiting(rank.global_rank)
                        # Peers of a dead JAX rank block forever in collectives: stop them now.
                        groups.stop_all(signal.SIGTERM)
                        break
                else:
                    if watch.timed_out(plan.rendezvous_timeout_s) is not None:
                        rendezvous_failed = True
                        groups.stop_all(signal.SIGTERM)
            time.sleep(POLL_INTERVAL_S)
        if failed is None and groups.received is None and not rendezvous_failed:
            for rank, process in running:
                if process.returncode != 0:
                    failed = (rank, exit_code_of(process.returncode))
                    break
        for pump in pumps:
            pump.join(timeout=5)
    view.close()
    if groups.received is not None:
        err.write(f"islab-train: stopped by signal {groups.received}; run directory: {run_dir}\n")
        return 128 + groups.received
    if rendezvous_failed:
        err.write(rendezvous_message(plan) + "\n")
        return failed[1] if failed is not None else 1
    if failed is None:
        return 0
    rank, status = failed
    log = Path(run_dir, "logs", f"rank_{rank.global_rank}.log")
    lines = list(tails[rank.global_rank])
    exception = last_exception_line(lines)
    if lines:
        err.write(f"  last output of rank {rank.global_rank}:\n" + "".join(f"    {line}\n" for line in lines[-20:]))
    # "RuntimeError: boom", or 137 -> -9 -> "killed by SIGKILL"
    how = f": {exception}" if exception else describe_end(128 - status if status > 128 else status, None)
    err.write(
        f"error: rank {rank.global_rank} (node {node.node_rank}, local rank {rank.local_rank}) "
        f"exited with code {status}{how}; the other ranks were stopped. See {log}. "
        f"Run directory: {run_dir}\n"
    )
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
