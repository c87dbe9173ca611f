"""Two "machines" on one host: network namespaces joined by a veth pair (tests only).

A network namespace has its own interfaces, addresses, routes and ports, so two of them joined by
a virtual ethernet cable behave like two nodes on a private network -- enough to run a real
two-node torchrun job (gloo over TCP between the namespaces) on a CI machine. The recipe (run as
root, with iproute2):

    ip netns add A; ip netns add B
    ip link add vA type veth peer name vB; ip link set vA netns A; ip link set vB netns B
    ip -n A link set dev vA name islab0; ip -n B link set dev vB name islab0   # same name on both
    ip -n A addr add 10.77.S.1/24 dev islab0; ip -n B addr add 10.77.S.2/24 dev islab0
    ip -n A link set islab0 up; ip -n B link set islab0 up; ip -n A link set lo up; ip -n B link set lo up
    ip netns exec A <command>     # runs <command> "on node A"

Names are unique per test run (tests may run concurrently), and the only addresses used are the
ones of the namespaces created here (10.77.S.0/24, S chosen per run). :func:`two_nodes` is a
context manager that always deletes both namespaces (which also removes the veth pair) and kills
every process still running inside them, also when the test fails.

Also here, for the tests that drive islab-train: collecting the processes of a job (psutil) and
waiting for training to be under way.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

SUBNET_PREFIX = "10.77"


# Inside its namespace each end of the veth pair is renamed to this, so that -- as on a real
# cluster where every node has eth0 -- one cluster file with GLOO_SOCKET_IFNAME serves both nodes.
INTERFACE = "islab0"


@dataclass(frozen=True)
class Node:
    """One namespace: its name, its end of the veth pair (named :data:`INTERFACE` inside) and
    its address."""

    namespace: str
    veth: str
    address: str
    interface: str = INTERFACE

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be created here (for pytest.skip), or None when they can."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    probe = f"islabprobe{uuid.uuid4().hex[:6]}"
    result = _ip("netns", "add", probe)
    if result.returncode != 0:
        return f"'ip netns add' failed: {result.stderr.strip() or result.returncode}"
    _ip("netns", "del", probe)
    return None


def namespace_pids(namespace: str) -> list[int]:
    result = _ip("netns", "pids", namespace)
    return [int(pid) for pid in result.stdout.split()] if result.returncode == 0 else []


def _free_subnet() -> int:
    """A third octet for 10.77.S.0/24 that no interface of this host (root namespace) uses."""
    used = set(re.findall(rf"{re.escape(SUBNET_PREFIX)}\.(\d+)\.", _ip("-o", "addr").stdout))
    for netns in _ip("netns", "list").stdout.split("\n"):
        name = netns.split(" ")[0]
        if name:
            used |= set(re.findall(rf"{re.escape(SUBNET_PREFIX)}\.(\d+)\.", _ip("-n", name, "-o", "addr").stdout))
    start = int(uuid.uuid4().int % 200) + 20
    for offset in range(200):
        candidate = (start + offset) % 250 + 1
        if str(candidate) not in used:
            return candidate
    raise RuntimeError("no free 10.77.x.0/24 subnet")


@contextlib.contextmanager
def two_nodes() -> Iterator[tuple[Node, Node]]:
    """Create two namespaces joined by a veth pair; always delete them (and kill what runs in
    them) on the way out."""
    tag = uuid.uuid4().hex[:6]
    subnet = _free_subnet()
    nodes = (
        Node(f"islab{tag}a", f"vi{tag}a", f"{SUBNET_PREFIX}.{subnet}.1"),
        Node(f"islab{tag}b", f"vi{tag}b", f"{SUBNET_PREFIX}.{subnet}.2"),
    )
    created: list[str] = []
    try:
        for node in nodes:
            _check(_ip("netns", "add", node.namespace))
            created.append(node.namespace)
        a, b = nodes
        _check(_ip("link", "add", a.veth, "type", "veth", "peer", "name", b.veth))
        for node in nodes:
            _check(_ip("link", "set", node.veth, "netns", node.namespace))
            _check(_ip("-n", node.namespace, "link", "set", "dev", node.veth, "name", node.interface))
            _check(_ip("-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", node.interface))
            _check(_ip("-n", node.namespace, "link", "set", node.interface, "up"))
            _check(_ip("-n", node.namespace, "link", "set", "lo", "up"))
        yield nodes
    finally:
        for namespace in created:
            for pid in namespace_pids(namespace):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for namespace in created:
            deadline = time.monotonic() + 10
            while namespace_pids(namespace) and time.monotonic() < deadline:
                time.sleep(0.1)
            _ip("netns", "del", namespace)  # also removes the veth pair


def _check(result: subprocess.CompletedProcess[str]) -> None:
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(result.args)} failed: {result.stderr.strip()}")


# ----------------------------------------------------------------------------------------------
# The processes of a job
# ----------------------------------------------------------------------------------------------


def collect_tree(pid: int, seen: dict[int, psutil.Process]) -> None:
    """Add ``pid`` and its descendants alive now to ``seen`` (psutil objects remember the start
    time, so a reused pid is not mistaken for one of ours later)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        seen.setdefault(root.pid, root)
        for child in root.children(recursive=True):
            seen.setdefault(child.pid, child)


def alive(processes: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The ones still running (zombies count as gone: they hold nothing but a pid)."""
    left = []
    for process in processes.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
    return left


def kill_all(processes: dict[int, psutil.Process]) -> None:
    for process in alive(processes):
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a running process (a zombie still answers kill(0), so its state is read too)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def run_dir_of(log_dir: Path) -> Path | None:
    """The single run directory under ``log_dir`` (<lib>/<task>/<stamp>), once it exists."""
    found = [path for path in log_dir.glob("*/*/*") if path.is_dir()]
    return found[0] if len(found) == 1 else None


def training_under_way(run_dir: Path | None, iterations: int = 2) -> bool:
    """Rank 0 has finished ``iterations`` iterations: from ``progress.jsonl`` when the adapter
    writes it, else from rsl_rl's "Learning iteration N/M" lines in rank 0's log."""
    if run_dir is None:
        return False
    progress = run_dir / "progress.jsonl"
    if progress.exists() and len(progress.read_text().splitlines()) >= iterations:
        return True
    log = run_dir / "logs" / "rank_0.log"
    if log.exists():
        done = re.findall(r"Learning iteration (\d+)/", log.read_text(errors="replace"))
        return bool(done) and int(done[-1]) >= iterations
    return False


def wait_until(condition: object, timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# -- a two-node islab-train job in the namespaces ------------------------------------------------------

PORT = 29555  # any port: nothing else lives in a fresh namespace
RUN_NAME = "netns_pair"


def cluster_file(tmp_path: Path, node0: Node, backend: str, max_iterations: int) -> Path:
    rendezvous: dict[str, object] = {"backend": backend, "timeout_s": 120}
    if backend == "static":
        rendezvous |= {"master_addr": node0.address, "master_port": PORT}
    else:
        rendezvous |= {"endpoint": f"{node0.address}:{PORT}", "id": f"netns-{backend}"}
    spec = {
        "lib": "rsl_rl",
        "device": "cpu",
        "nnodes": 2,
        "nproc_per_node": 2,
        "num_envs": 64,
        "max_iterations": max_iterations,
        "rendezvous": rendezvous,
        "run_name": RUN_NAME,
        "env": {"GLOO_SOCKET_IFNAME": node0.interface},
    }
    path = tmp_path / f"two-node-{backend}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def stderr_of(tmp_path: Path, node_rank: int) -> str:
    return (tmp_path / f"node{node_rank}.err").read_text(errors="replace")


def wait_all(processes: list[subprocess.Popen[bytes]], timeout_s: float) -> list[int | None]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(process.poll() is None for process in processes):
        time.sleep(0.2)
    return [process.poll() for process in processes]
