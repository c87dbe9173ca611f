"""``--num-envs auto``: ``fit``'s recommendation, kept per job shape so a launch measures once.

A cache entry is a JSON file under ``$XDG_CACHE_HOME/islab-train/fit`` (default ``~/.cache``; safe
to delete), named by the digest of its key: the task, library and framework, the device and its
model (the GPU's name from ``nvidia-smi``; for CPU ranks the processor's name and the memory one
rank may use, which depends on ``--nproc``), the agent-config overrides (they change the rollout
storage), the memory budget the recommendation was made against (``--memory-limit`` and
``--memory-fraction``: a fit that left room for another job on the GPU is not what a launch with the
defaults should reuse), and the installed versions of Python, islab-train, torch and the library. Any of those
changing makes a new key, hence a new measurement. ``fit`` writes an entry after every run; a
launch with ``--num-envs auto`` reads it, or runs ``fit`` first (torch-free here; the children
import torch).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from islab.fit.memory import cpu_rank_memory_bytes
from islab.fit.search import FitResult, FitSettings
from islab.fit.table import DEFAULT_MEMORY_FRACTION, FitRow
from islab.libs.registry import LIBRARIES
from islab.rundir.records import read_json_object, write_text_atomic
from islab.spec.run_spec import RunSpec


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "islab-train" / "fit"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model() -> str | None:
    """The first visible GPU's name (``nvidia-smi --query-gpu=name``), None without nvidia-smi."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        result = subprocess.run([binary, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=15, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    names = result.stdout.strip().splitlines() if result.returncode == 0 else []
    return names[0].strip() if names else None


def key_of(
    spec: RunSpec, *, memory_limit_bytes: int | None = None, memory_fraction: float = DEFAULT_MEMORY_FRACTION
) -> dict[str, Any]:
    """The cache key of a job shape and the memory budget given to fit (``--memory-limit``, None: the
    device's; ``--memory-fraction``); ``--num-envs auto`` reads the defaults' entry."""
    library = LIBRARIES[spec.lib]
    if spec.device == "cuda":
        device_model = gpu_model() or "unknown GPU"
    else:
        device_model = f"{cpu_model()}, {cpu_rank_memory_bytes(spec.nproc_per_node)} B per rank"
    return {
        "task": spec.task,
        "lib": spec.lib,
        "ml_framework": spec.ml_framework,
        "device": spec.device,
        "device_model": device_model,
        "overrides": sorted(spec.overrides),
        "memory_limit": memory_limit_bytes,
        "memory_fraction": memory_fraction,
        "versions": {
            name: _version(name) for name in ("islab-train", "torch", *library.distributions(spec.ml_framework))
        }
        | {"python": platform.python_version()},
    }


def entry_path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"{key['task']}-{key['lib']}-{digest}.json"


def store(
    spec: RunSpec, num_envs: int, memory_limit_bytes: int, device_name: str = "", *,
    given_memory_limit: int | None = None, memory_fraction: float = DEFAULT_MEMORY_FRACTION,
    rows: Sequence[FitRow] = (),
) -> Path:  # fmt: skip
    """Keep fit's recommendation; ``memory_limit_bytes`` is the budget it measured against,
    ``given_memory_limit`` / ``memory_fraction`` the options that chose it (part of the key)."""
    key = key_of(spec, memory_limit_bytes=given_memory_limit, memory_fraction=memory_fraction)
    path = entry_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"num_envs": num_envs, "memory_limit_bytes": memory_limit_bytes, "device_name": device_name,
             "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "key": key,
             "rows": [dataclasses.asdict(row) for row in rows]}  # fmt: skip
    write_text_atomic(path, json.dumps(entry, indent=2))
    return path


def store_result(spec: RunSpec, num_envs: int, result: FitResult, settings: FitSettings) -> Path:
    """Keep a finished fit's recommendation, under the key of the settings that chose it."""
    return store(spec, num_envs, result.memory_limit_bytes, result.device_name, rows=result.rows,
                 given_memory_limit=settings.memory_limit_bytes, memory_fraction=settings.memory_fraction)  # fmt: skip


def measured(spec: RunSpec) -> tuple[list[FitRow], int] | None:
    """The rows ``fit`` measured for this job shape (with its defaults' budget) and the device's
    memory it measured against; None when nothing is cached (or an entry without rows)."""
    entry = read_json_object(entry_path(key_of(spec)))
    if entry is None or not entry.get("rows") or not isinstance(entry.get("memory_limit_bytes"), int):
        return None
    try:
        rows = [FitRow(**row) for row in entry["rows"]]
    except TypeError:  # an entry of another version
        return None
    return rows, entry["memory_limit_bytes"]


def lookup(spec: RunSpec) -> tuple[int, Path, str] | None:
    """The cached recommendation for this job shape: (num_envs, its file, when it was measured)."""
    path = entry_path(key_of(spec))
    entry = read_json_object(path)
    if entry is None or not isinstance(entry.get("num_envs"), int):
        return None
    return entry["num_envs"], path, str(entry.get("measured_at", "?"))
