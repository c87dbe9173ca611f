"""How much memory one CPU rank may use, read at the edge (torch-free): the machine's RAM
(``/proc/meminfo``'s ``MemTotal``) or, when lower, the memory limit of this process's cgroup (v2
``memory.max``, v1 ``memory.limit_in_bytes``: a container, a SLURM job, a systemd slice), shared by
the ranks a node runs. A GPU's memory is read by the child itself (:mod:`islab.fit.child`).
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 63-bit number; anything above 2^60 is none.
NO_LIMIT_ABOVE = 2**60


def machine_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _limit_in(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= NO_LIMIT_ABOVE:  # "max" (v2) or v1's huge "unlimited"
        return None
    return int(text)


def cgroup_limit_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """The lowest memory limit on this process's cgroup path (v2 or v1), None without one."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            candidates += [root / relative / "memory.max", root / "memory.max"]
        elif "memory" in controllers.split(","):
            candidates += [
                root / "memory" / relative / "memory.limit_in_bytes",
                root / "memory" / "memory.limit_in_bytes",
            ]
    limits = [limit for limit in map(_limit_in, candidates) if limit is not None]
    return min(limits) if limits else None


def cpu_rank_memory_bytes(ranks_per_node: int) -> int:
    """What one of ``ranks_per_node`` CPU ranks may use: the lower of RAM and the cgroup limit, shared."""
    known = [value for value in (machine_memory_bytes(), cgroup_limit_bytes()) if value]
    total = min(known) if known else 0
    return total // max(1, ranks_per_node)
