"""What a task's real registration says, read in a child process and cached per installed version.

The launcher knows a task's id, package and extra from entry-point metadata alone (no import). Its
sizes, default number of envs and agent configs are whatever the task's ``gym.register`` computes,
so they are read by importing the package for real: :mod:`islab.tasks.probe`, in a child process
(it may import torch; the launcher must not). That costs seconds, so each package's description
is kept in a JSON file under the user's cache directory (``$XDG_CACHE_HOME/islab-train/tasks``,
default ``~/.cache``; safe to delete: it is rebuilt on the next command that needs it).

A cache file is valid while its *fingerprint* holds: the Python interpreter, the versions of
islab-train, the task's distribution and its extra (mjlab), and the size and modification time of
every file the registration was read from (the package's own files, the modules its entry points
name, its YAML agent configs). Editing a task's ``__init__.py`` therefore re-reads it; so does
upgrading mjlab. A failed import is never cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from islab.rundir.records import read_json_object

CACHE_FORMAT = 1  # bump when the probe's output changes shape
PROBE_MODULE = "islab.tasks.probe"
PROBE_TIMEOUT_S = 900  # mjlab imports every task config it ships; Warp may compile on a cold machine


class ProbeError(RuntimeError):
    """A task package could not be read: its import or its registration failed (message says which)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "islab-train" / "tasks"


def _version(distribution: str | None) -> str | None:
    if not distribution:
        return None
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def package_files(package_dir: Path) -> list[str]:
    """Every source and config file of a task package (``__pycache__`` aside)."""
    if package_dir.is_file():
        return [str(package_dir)]
    found = []
    for root, dirs, names in os.walk(package_dir):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        found += [os.path.join(root, name) for name in names if not name.endswith((".pyc", ".tmp"))]
    return sorted(found)


def _stat(paths: Iterable[str]) -> dict[str, list[int] | None]:
    stamps: dict[str, list[int] | None] = {}
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stamps[path] = None
        else:
            stamps[path] = [info.st_mtime_ns, info.st_size]
    return stamps


def versions(distributions: Iterable[str | None]) -> dict[str, Any]:
    """The installed versions a cached description depends on, plus the interpreter."""
    stamp: dict[str, Any] = {"format": CACHE_FORMAT, "python": sys.executable, "python_version": sys.version}
    for name in ("islab-train", *distributions):
        if name:
            stamp[name] = _version(name)
    return stamp


def cache_file(package: str, source: Path) -> Path:
    key = hashlib.sha256(f"{sys.executable}\0{package}\0{source}".encode()).hexdigest()[:12]
    return cache_dir() / f"{package}-{key}.json"


def read_cached(path: Path, stamp: Mapping[str, Any], expected: Iterable[str] | None) -> dict[str, Any] | None:
    """The cached description at ``path`` if its fingerprint still holds, else None."""
    entry = read_json_object(path)
    if entry is None or entry.get("versions") != dict(stamp):
        return None
    files = entry.get("files") or {}
    if _stat(files) != files:
        return None
    tasks = entry.get("tasks") or {}
    if expected is not None and not set(expected) <= set(tasks):
        return None  # a new id was announced for this package
    return tasks


def write_cached(path: Path, stamp: Mapping[str, Any], files: Iterable[str], tasks: Mapping[str, Any]) -> None:
    """Atomically: concurrent launchers may write the same file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"versions": dict(stamp), "files": _stat(sorted(set(files))), "tasks": dict(tasks)}
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(entry, indent=1), encoding="utf-8")
    os.replace(partial, path)


def run_probe(packages: Mapping[str, list[str] | None]) -> dict[str, dict[str, Any]]:
    """Import ``packages`` in one child process; package -> ``{"tasks", "files"}`` or ``{"error"}``."""
    request = {"sys_path": sys.path, "cache_dir": str(cache_dir()), "packages": dict(packages)}
    env = {**os.environ, "MJLAB_WARP_QUIET": os.environ.get("MJLAB_WARP_QUIET", "1")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", PROBE_MODULE], input=json.dumps(request), capture_output=True, text=True,
            timeout=PROBE_TIMEOUT_S, env=env, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ProbeError(f"reading {', '.join(packages)} took over {PROBE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise ProbeError(f"reading {', '.join(packages)} failed: {tail[0]}")
    return json.loads(done.stdout)


class Describer:
    """Package -> its tasks' descriptions, from the cache or (for every stale package at once) the probe.

    ``requests`` maps a package to (the ids its entry points announce or None, the distribution and
    extra it belongs to, its source path). Counts the child processes it starts (``probes``), which
    the tests read to show that a warm cache starts none."""

    def __init__(self) -> None:
        self.probes = 0

    def describe(
        self, requests: Mapping[str, tuple[list[str] | None, tuple[str | None, ...], Path]]
    ) -> dict[str, dict[str, Any] | ProbeError]:
        results: dict[str, dict[str, Any] | ProbeError] = {}
        stale: dict[str, list[str] | None] = {}
        for package, (expected, distributions, source) in requests.items():
            cached = read_cached(cache_file(package, source), versions(distributions), expected)
            if cached is None:
                stale[package] = expected
            else:
                results[package] = cached
        if not stale:
            return results
        self.probes += 1
        try:
            report = run_probe(stale)
        except ProbeError as error:
            return {**results, **dict.fromkeys(stale, error)}
        for package in stale:
            answer = report.get(package) or {"error": f"the probe did not report {package}"}
            if "error" in answer:
                results[package] = ProbeError(answer["error"])
                continue
            expected, distributions, source = requests[package]
            write_cached(
                cache_file(package, source), versions(distributions),
                [*package_files(source), *answer["files"]], answer["tasks"],
            )  # fmt: skip
            results[package] = answer["tasks"]
        return results
