"""Rank side of ``islab-train fit``: ``python -m islab.fit.child RESULT.json WORKER_ARGS...`` trains
one rank exactly as the job's worker would (:func:`islab.worker.__main__.run`, the same arguments)
and writes what it measured to ``RESULT.json``:

* ``env_steps_per_s``: the last iteration's, from the run's ``progress.jsonl`` (the first iteration
  includes start-up);
* on a GPU, ``gpu``: ``max_memory_reserved`` / ``max_memory_allocated`` (torch's caching allocator:
  its peak), and from NVML (when ``nvidia-ml-py`` is installed) this process's used memory and the
  device's total. The peak the process held is the allocator's reserved peak plus what the process
  holds outside the allocator (CUDA context, cuBLAS workspaces): NVML's used minus the allocator's
  reserved, both read at the end;
* ``out_of_memory``: the child ran out (``torch.OutOfMemoryError`` on a GPU; ``MemoryError`` or
  torch's "can't allocate memory" on CPU) -- then it exits ``OUT_OF_MEMORY_EXIT``, a data point for
  the search, not a failure.

CPU memory is not measured here: the parent reads the child's peak RSS from ``wait4``, which stays
true when the kernel's OOM killer ends the child.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from islab import rundir

OUT_OF_MEMORY_EXIT = 3
CPU_OOM_MARKERS = ("can't allocate memory", "cannot allocate memory", "out of memory")


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, MemoryError):
        return True
    if type(error).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError (CUDA), without importing torch here
        return True
    return isinstance(error, RuntimeError) and any(marker in str(error).lower() for marker in CPU_OOM_MARKERS)


def gpu_memory(device_index: int = 0) -> dict[str, Any]:
    """torch's allocator peaks and, when NVML answers, this process's and the device's memory."""
    import torch

    stats: dict[str, Any] = {
        "max_memory_allocated": torch.cuda.max_memory_allocated(device_index),
        "max_memory_reserved": torch.cuda.max_memory_reserved(device_index),
        "memory_reserved": torch.cuda.memory_reserved(device_index),
        "total_memory": torch.cuda.get_device_properties(device_index).total_memory,
        "name": torch.cuda.get_device_name(device_index),
    }
    try:
        import pynvml  # nvidia-ml-py

        # torch's own mapping from a CUDA index to NVML's (honours CUDA_VISIBLE_DEVICES, UUIDs too)
        handle = torch.cuda._get_pynvml_handler(device_index)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        stats["nvml_total"], stats["nvml_used"] = int(info.total), int(info.used)
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == os.getpid() and process.usedGpuMemory is not None:
                stats["nvml_process_used"] = int(process.usedGpuMemory)
    except Exception as error:  # no NVML (not installed, no driver access): the allocator's numbers alone
        stats["nvml_error"] = f"{type(error).__name__}: {error}"
    outside = stats.get("nvml_process_used", 0) - stats["memory_reserved"]
    stats["peak_bytes"] = stats["max_memory_reserved"] + max(0, outside)
    return stats


def last_steps_per_s(run_dir: Path) -> float | None:
    records = rundir.read_progress(rundir.progress_path(run_dir))
    rates = [record.get("steps_per_s") for record in records if record.get("steps_per_s")]
    return float(rates[-1]) if rates else None


def write_result(path: Path, result: dict[str, Any]) -> None:
    rundir.write_text_atomic(path, json.dumps(result))


def main(argv: list[str]) -> int:
    from islab.worker.__main__ import parse_args, run

    result_path, worker_argv = Path(argv[0]), argv[1:]
    args = parse_args(worker_argv)
    result: dict[str, Any] = {"num_envs": args.num_envs, "device": args.device}
    try:
        run(args)
    except BaseException as error:
        if not is_out_of_memory(error):
            raise
        result.update(out_of_memory=True, error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
        if args.device == "cuda":
            result["gpu"] = gpu_memory()
        write_result(result_path, result)
        print(f"[islab] fit: out of memory at {args.num_envs} envs: {result['error']}", file=sys.stderr, flush=True)
        return OUT_OF_MEMORY_EXIT
    result["env_steps_per_s"] = last_steps_per_s(args.run_dir)
    if args.device == "cuda":
        result["gpu"] = gpu_memory()
    write_result(result_path, result)
    return 0


if __name__ == "__main__":
    from islab.preflight.quick_exit import end

    end(main(sys.argv[1:]))
