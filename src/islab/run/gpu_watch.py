"""Which GPU each rank is on, watched from the launcher through NVML: per-rank GPU memory and
utilisation for the console, and ranks that all sit on one GPU stopped within seconds.

The most common multi-GPU mistake in a training script is never setting the device from
``LOCAL_RANK``: every rank then creates its CUDA context on GPU 0, and the job hangs at its first
collective ("Synchronizing parameters") or crawls. The launcher sees it without the script's help:
NVML lists the processes on each GPU (``nvmlDeviceGetComputeRunningProcesses``: ``pid`` and
``usedGpuMemory``), and the launcher knows each rank's process tree (a rank is a process whose
environment holds a rank number its parent's does not: :func:`islab.run.event_hangs.rank_processes`;
its children count as the rank, so a ``--command`` shell's python is found too). So it works for
``--script``/``--module``/``--command`` entry points as well as for islab's worker.

**Shared GPU**: two or more ranks whose every process on a GPU is on the same one GPU, seen on two
samples in a row (a rank that touches GPU 0 before moving to its own is not flagged; one that
stays is). The job is stopped and one message names the ranks, the GPU and the fix.

NVML comes from ``nvidia-ml-py`` (``import pynvml``); without it, or without a driver, the watch is
off and nothing changes. Tests put a fake ``pynvml`` with the real module's names and return shapes
on the path (``tests/fixtures/fake_nvml``); ``scripts/gpu_acceptance.py`` checks the real one.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from islab.run.event_hangs import rank_processes
from islab.run.process_tree import process_tree

SAMPLE_INTERVAL_S = 1.0  # NVML's process list costs ~1 ms per GPU; once a second is plenty
SET_DEVICE_FIX = 'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))'


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_total: int
    utilization: int | None  # percent of the last sample period the GPU was busy (nvmlUtilization_t.gpu)


@dataclass(frozen=True)
class RankGpu:
    """One rank's use of one GPU: the memory its processes hold there."""

    rank: int
    gpu: int
    memory_bytes: int


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)  # bytes before 11.515


def load_nvml() -> Any | None:
    """``pynvml`` initialised, or None (not installed, no driver, no GPU)."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
        if nvml.nvmlDeviceGetCount() < 1:
            nvml.nvmlShutdown()
            return None
        return nvml
    except Exception:  # ImportError, NVMLError_LibraryNotFound / DriverNotLoaded, ...
        return None


def sample(nvml: Any) -> tuple[list[Gpu], dict[int, list[tuple[int, int]]]]:
    """Every GPU, and ``{gpu index: [(pid, used bytes), ...]}`` of the compute processes on it."""
    gpus, processes = [], {}
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        utilization = None
        with contextlib.suppress(Exception):  # NVMLError_NotSupported on some boards, MIG instances
            utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        gpus.append(Gpu(index, _text(nvml.nvmlDeviceGetName(handle)), _text(nvml.nvmlDeviceGetUUID(handle)),
                        int(memory.total), utilization))  # fmt: skip
        # usedGpuMemory is None where the driver cannot tell (Windows WDDM): counted as 0
        processes[index] = [(int(p.pid), int(p.usedGpuMemory or 0))
                            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]  # fmt: skip
    return gpus, processes


def ranks_on_gpus(processes: Mapping[int, Sequence[tuple[int, int]]], rank_of_pid: Mapping[int, int]) -> list[RankGpu]:
    """Pure: the GPU processes that belong to ranks, summed per (rank, GPU)."""
    used: dict[tuple[int, int], int] = {}
    for gpu, listed in processes.items():
        for pid, memory in listed:
            rank = rank_of_pid.get(pid)
            if rank is not None:
                used[rank, gpu] = used.get((rank, gpu), 0) + memory
    return [RankGpu(rank, gpu, memory) for (rank, gpu), memory in sorted(used.items())]


def shared_gpu(placed: Sequence[RankGpu]) -> tuple[int, list[int]] | None:
    """Pure: (GPU, ranks) when two or more ranks are on that GPU and on no other one."""
    gpus_of: dict[int, set[int]] = {}
    for item in placed:
        gpus_of.setdefault(item.rank, set()).add(item.gpu)
    crowded: dict[int, list[int]] = {}
    for rank, gpus in sorted(gpus_of.items()):
        if len(gpus) == 1:
            crowded.setdefault(next(iter(gpus)), []).append(rank)
    for gpu, ranks in sorted(crowded.items()):
        if len(ranks) >= 2:
            return gpu, ranks
    return None


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


def shared_gpu_message(gpu: Gpu, ranks: Sequence[int], entrypoint: bool) -> str:
    """The error: the ranks, the GPU and the fix."""
    ours = ("drop the entry point and let islab's worker train (it sets every rank's device)" if entrypoint
            else "islab's worker sets it itself; check CUDA_VISIBLE_DEVICES and the ranks' env")  # fmt: skip
    return (
        f"error: ranks {_ranks_text(ranks)} are all on GPU {gpu.index} ({gpu.name}, {gpu.uuid}): every one of their "
        "processes created its CUDA context on that one device, so they share its memory and compute and the job "
        "hangs at its first collective (NCCL refuses two ranks on one GPU) or crawls. Fix: set each rank's device "
        f'from its local rank before any CUDA work: {SET_DEVICE_FIX} (or device=f"cuda:{{local_rank}}"), or '
        f"{ours}."
    )


def usage_text(placed: Sequence[RankGpu], gpus: Sequence[Gpu]) -> str:
    """``rank 0: GPU 0 3.1 GB 87% · rank 1: GPU 1 3.0 GB 85%`` (memory held by the rank's processes; the
    GPU's utilisation)."""
    by_index = {gpu.index: gpu for gpu in gpus}
    parts = []
    for item in placed:
        busy = by_index[item.gpu].utilization if item.gpu in by_index else None
        parts.append(f"rank {item.rank}: GPU {item.gpu} {item.memory_bytes / 1e9:.1f} GB"
                     + ("" if busy is None else f" {busy}%"))  # fmt: skip
    return " · ".join(parts)


class GpuWatch:
    """Called by the poll loop with the job's live pids (like the hang watch): True stops the job
    when ranks share a GPU. ``latest`` and ``peaks`` feed the console's live line and summary."""

    def __init__(self, nvml: Any, *, entrypoint: bool, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.nvml = nvml
        self.entrypoint = entrypoint
        self.interval_s = interval_s
        self.gpus: list[Gpu] = []
        self.latest: list[RankGpu] = []
        self.peaks: dict[tuple[int, int], int] = {}  # (rank, gpu) -> the most memory seen
        self.busiest: dict[int, int] = {}  # gpu -> the highest utilisation seen
        self._suspect: tuple[int, tuple[int, ...]] | None = None
        self._found: tuple[Gpu, list[int]] | None = None
        self._next = 0.0

    def rank_pids(self, live_pids: Collection[int]) -> dict[int, int]:
        """``{pid: rank}`` for every process of every rank (a rank's descendants included)."""
        owners: dict[int, int] = {}
        for rank, pid in rank_processes(live_pids).items():
            owners[pid] = rank
            for child in process_tree([pid]):
                owners.setdefault(child, rank)
        return owners

    def __call__(self, live_pids: Collection[int]) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval_s
        try:
            self.gpus, processes = sample(self.nvml)
        except Exception:  # a driver hiccup must never stop training
            return False
        self.latest = ranks_on_gpus(processes, self.rank_pids(live_pids))
        for item in self.latest:
            key = (item.rank, item.gpu)
            self.peaks[key] = max(self.peaks.get(key, 0), item.memory_bytes)
        for gpu in self.gpus:
            if gpu.utilization is not None and any(item.gpu == gpu.index for item in self.latest):
                self.busiest[gpu.index] = max(self.busiest.get(gpu.index, 0), gpu.utilization)
        shared = shared_gpu(self.latest)
        suspect = None if shared is None else (shared[0], tuple(shared[1]))
        if suspect is not None and suspect == self._suspect:  # the same on two samples in a row
            self._found = (self.gpus[suspect[0]], list(suspect[1]))
            return True
        self._suspect = suspect
        return False

    def message(self) -> str:
        return shared_gpu_message(*self._found, self.entrypoint) if self._found else ""

    def live_text(self) -> str | None:
        return usage_text(self.latest, self.gpus) or None

    def summary_text(self) -> str | None:
        """Per rank: its GPU, the most memory it held, the GPU's highest utilisation seen."""
        placed = [RankGpu(rank, gpu, memory) for (rank, gpu), memory in sorted(self.peaks.items())]
        peak_gpus = [Gpu(g.index, g.name, g.uuid, g.memory_total, self.busiest.get(g.index)) for g in self.gpus]
        return usage_text(placed, peak_gpus) or None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


class FirstOf:
    """Several watches as the poll loop's one ``hung``: the first that says stop gives the message."""

    def __init__(self, *watches: Any) -> None:
        self.watches = [watch for watch in watches if watch is not None]
        self.stopped_by: Any = None

    def __call__(self, live_pids: Collection[int]) -> bool:
        for watch in self.watches:
            if watch(live_pids):
                self.stopped_by = watch
                return True
        return False

    def message(self) -> str:
        return self.stopped_by.message() if self.stopped_by is not None else ""
