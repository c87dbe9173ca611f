"""Known collective failures: a symptom in a rank's output -> what is wrong and the fix.

Multi-GPU hangs and NCCL crashes are the most reported distributed-training problem among Isaac
Lab, rsl_rl, skrl and rl_games users. Most have a handful of causes whose symptoms NCCL, gloo and
torch's rendezvous print in words that do not name the cause. This table is the ONE place that
maps them: the pre-flight check and the failure message of a real run both read it, and
docs/NCCL.md renders it. Every pattern is a message the library really prints (the tests quote
real log lines); each ``fix`` names the setting, where it goes, and what it costs.

``NCCL_SAFE_ENV`` is what ``--nccl-safe`` sets: the conservative transport settings users are told
to try first, each slower than NCCL's own choice (docs/NCCL.md says by how much to expect).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownFailure:
    name: str
    patterns: tuple[str, ...]  # regular expressions, searched in each line
    what: str  # the cause, in the user's terms; may use {0} for the pattern's first group
    fix: str

    def matches(self, line: str) -> re.Match[str] | None:
        for pattern in self.patterns:
            found = re.search(pattern, line)
            if found:
                return found
        return None


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        "gloo interface",
        (r"Unable to find address for: (\S+)",),
        "GLOO_SOCKET_IFNAME={0} names no network interface of this node",
        "Set GLOO_SOCKET_IFNAME to the interface that carries this node's address (ip -br addr), e.g. "
        "env: {GLOO_SOCKET_IFNAME: eth0} in the cluster file, or unset it",
    ),
    KnownFailure(
        "NCCL interface",
        (
            r"Bootstrap ?: no socket interface found",
            r"no NCCL_SOCKET_IFNAME interface found",
            r"NET/Socket ?: No interface found",
            r"ncclSocketInit: connecting to address .* is neither AF_INET",
        ),
        "NCCL found no usable network interface: NCCL_SOCKET_IFNAME names none that exists and is up",
        "Set NCCL_SOCKET_IFNAME to the interface that carries this node's address (ip -br addr; the same "
        "name on every node, or a prefix such as eth), or unset it so NCCL picks one",
    ),
    KnownFailure(
        "shared memory",
        (
            r"Error while (creating|attaching to) shared memory segment /dev/shm/nccl",
            r"failed to extend /dev/shm/nccl\S* to \d+ bytes",
        ),
        "NCCL could not allocate its buffers in /dev/shm (a container's default /dev/shm is 64 MB)",
        "Give the container more shared memory (docker run --shm-size=8g or --ipc=host; Kubernetes: an "
        "emptyDir with medium: Memory on /dev/shm), or set NCCL_SHM_DISABLE=1 (intra-node traffic then goes "
        "through P2P or the network: slower)",
    ),
    KnownFailure(
        "peer-to-peer",
        (
            r"peer access is not supported between these two devices",
            r"failed to open CUDA IPC handle",
            r"Cuda failure 217",
        ),
        "the GPUs of this node cannot reach each other's memory directly (peer-to-peer), e.g. consumer GPUs "
        "or a virtualised PCIe topology",
        "Set NCCL_P2P_DISABLE=1 (intra-node traffic goes through shared memory: slower on NVLink machines)",
    ),
    KnownFailure(
        "illegal memory access",
        (r"an illegal memory access was encountered",),
        "a CUDA illegal memory access inside the collective path (reported with Isaac Lab humanoid training "
        "on several GPUs, Isaac Lab issue 4011)",
        "Try Isaac Lab's documented workaround: NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_ALGO=Ring "
        "(islab-train --nccl-safe sets them)",
    ),
    KnownFailure(
        "InfiniBand",
        (
            r"Failed to open libibverbs",
            r"NET/IB ?: Got (async|completion) .*error",
            r"Call to ibv_\w+ failed",
            r"NET/IB.*(timeout|Timeout)",
        ),
        "NCCL tried InfiniBand/RoCE and it failed (no IB hardware, no verbs library, or a port in error)",
        "Set NCCL_IB_DISABLE=1 to use plain sockets (slower across nodes on an IB fabric; no change without one)",
    ),
    KnownFailure(
        "master port",
        (
            r"Connection refused",
            r"client socket has timed out after \S+ while trying to connect to \(([^)]*)\)",
            r"socketStartConnect: Connect to (\S+) failed",
            r"No route to host",
        ),
        "this node could not connect to the rendezvous or a peer ({0}): node 0 not started yet, a wrong "
        "address, or a firewall dropping the port",
        "Check that node 0 runs and MASTER_ADDR is its address from this node (ping it), and open the master "
        "port and NCCL/gloo's ports between the nodes (firewall: iptables -L / ufw status)",
    ),
    KnownFailure(
        "collective timeout",
        (
            r"Watchdog caught collective operation timeout",
            r"ProcessGroupNCCL's watchdog got stuck",
            r"Timed out waiting \d+ms for recv operation",
        ),
        "a collective did not complete in time: a rank stopped taking part (crashed, hung, or is much slower)",
        "Look at the rank named first in the failure and its log; islab-train's hang watch (--hang-timeout) "
        "dumps every rank's stack; the NCCL flight-recorder trace is in the run directory",
    ),
)

# What --nccl-safe sets (Isaac Lab's documented workaround, plus P2P off): conservative transports.
NCCL_SAFE_ENV = {"NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}

# NCCL's own words for the choices that matter when reading a log: the interface, the transport.
_CHOSEN = re.compile(r"NCCL INFO (Bootstrap ?: Using|NET/Socket ?: Using|Using network|NET/IB ?: Using|"
                     r"Channel \d+/\d+ ?: .* via |NCCL_\w+ set by environment)")  # fmt: skip
_WARN = re.compile(r"NCCL WARN")


@dataclass(frozen=True)
class Finding:
    name: str
    what: str
    fix: str
    line: str  # the first line that showed it

    def to_dict(self, ranks: Sequence[int] = ()) -> dict[str, object]:
        return {"what": f"{self.name}: {self.what}", "ranks": list(ranks), "fix": self.fix, "line": self.line}


def triage(lines: Iterable[str]) -> list[Finding]:
    """Each known failure found in ``lines``, once, in table order."""
    found: dict[str, Finding] = {}
    for line in lines:
        for failure in KNOWN_FAILURES:
            if failure.name in found:
                continue
            match = failure.matches(line)
            if match:
                detail = next((group for group in match.groups() if group), "") if match.groups() else ""
                found[failure.name] = Finding(failure.name, failure.what.format(detail), failure.fix, line.strip())
    return [found[failure.name] for failure in KNOWN_FAILURES if failure.name in found]


def lines_that_matter(lines: Iterable[str], limit: int = 12) -> list[str]:
    """From an NCCL_DEBUG=INFO log: the interface and transport NCCL chose and every WARN line."""
    kept: list[str] = []
    for line in lines:
        if (_WARN.search(line) or _CHOSEN.search(line)) and line.strip() not in kept:
            kept.append(line.strip())
    warns = [line for line in kept if _WARN.search(line)]
    chosen = [line for line in kept if not _WARN.search(line)]
    return (chosen[: max(0, limit - len(warns))] + warns)[:limit]
