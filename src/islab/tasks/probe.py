"""``python -m islab.tasks.probe``: import task packages for real and describe what they register.

A task is ordinary Isaac Lab-style Python: its package calls ``gym.register(id=..., entry_point=...,
kwargs={"env_cfg_entry_point": <config class>, "<lib>_cfg_entry_point": <agent config>})`` with
whatever values it computes. The launcher must stay torch-free, so it never imports a task; it runs
this program in a child process (:mod:`islab.tasks.metadata`) and caches what it prints. This side
may import torch, gymnasium and the task's own dependencies (mjlab, Warp).

Input (stdin, JSON): ``{"sys_path": [...], "cache_dir": DIR, "packages": {PACKAGE: [task ids the
entry points announce, or null to take every id its import registers]}}``. Output (stdout, JSON):
``{PACKAGE: {"tasks": {ID: description}, "files": [...]} or {"error": "..."}}``. A description has
the env and config entry points, the observation and action sizes and default number of envs read
from an instance of the env config, and one YAML path per library: a ``"pkg:file.yaml"`` entry
point is that file; a config class or callable (Isaac Lab's ``RslRlOnPolicyRunnerCfg`` style, or
mjlab's bridge) is turned into a dict and written as YAML under ``cache_dir``, so every later
reader (launcher checks, ranks) reads a file either way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from islab.libs.registry import LIBRARIES, Library

ENV_CFG_KEY = "env_cfg_entry_point"
UNAVAILABLE_KEY = "islab_unavailable"  # optional registration kwarg: why islab cannot train the task
SIZES_HOOK = "islab_sizes"  # optional method of an env config: () -> (observation size, action size)


def load_object(entry_point: Any) -> Any:
    """Isaac Lab's entry points: ``"module:attr"`` or the object itself (a class, a callable)."""
    if not isinstance(entry_point, str):
        return entry_point
    module_name, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _name(entry_point: Any) -> str:
    if isinstance(entry_point, str):
        return entry_point
    target = getattr(entry_point, "func", entry_point)  # functools.partial shows what it wraps
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"


def _size(space: Any) -> int | None:
    """An Isaac Lab space as a flat size: an int, a gymnasium space, or a list of dims."""
    if space is None:
        return None
    if isinstance(space, int):
        return space
    shape = getattr(space, "shape", None)
    if shape is not None:
        return math.prod(int(dim) for dim in shape)
    if isinstance(space, list | tuple):
        return math.prod(int(dim) for dim in space)
    return None


def _plain(value: Any) -> Any:
    """A config object as YAML-safe data (dataclasses, ``to_dict()``, mappings, tuples)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _module_source(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    return str(Path(path).resolve()) if path else None


def _agent_config_file(task_id: str, library: Library, entry_point: Any, cache_dir: Path, files: set[str]) -> str:
    lib = library.name
    if isinstance(entry_point, str) and entry_point.endswith((".yaml", ".yml")):
        package, _, name = entry_point.partition(":")
        path = Path(importlib.import_module(package).__file__).parent / name
        files.add(str(path.resolve()))
        return str(path)
    import yaml

    factory = load_object(entry_point)
    config = _plain(factory() if callable(factory) else factory)
    if not isinstance(config, dict):
        raise TypeError(f"{task_id}: {library.cfg_entry_point_key} gave {type(config).__name__}, not a mapping")
    text = f"# {lib} agent config of {task_id}, generated from {_name(entry_point)} (islab.tasks.probe).\n"
    text += yaml.safe_dump(config, sort_keys=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = cache_dir / "agents" / task_id / f"{lib}_{digest}.yaml"  # content-addressed: never rewritten
    files.add(str(path))  # deleting the cache's agents/ folder re-reads the task
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    return str(path)


def describe_task(task_id: str, cache_dir: Path, files: set[str]) -> dict[str, Any]:
    import gymnasium

    spec = gymnasium.spec(task_id)
    kwargs = dict(spec.kwargs or {})
    cfg_entry_point = kwargs.get(ENV_CFG_KEY)
    cfg = load_object(cfg_entry_point)() if cfg_entry_point is not None else None
    sizes = getattr(cfg, SIZES_HOOK)() if hasattr(cfg, SIZES_HOOK) else None
    if sizes is None:
        sizes = (_size(getattr(cfg, "observation_space", None)), _size(getattr(cfg, "action_space", None)))
    num_envs = getattr(cfg, "num_envs", None) or getattr(getattr(cfg, "scene", None), "num_envs", None)
    for entry_point in (spec.entry_point, cfg_entry_point):
        if isinstance(entry_point, str):
            source = _module_source(entry_point.partition(":")[0])
            if source:
                files.add(source)
    agent_configs = {
        lib: _agent_config_file(task_id, library, kwargs[library.cfg_entry_point_key], cache_dir, files)
        for lib, library in LIBRARIES.items()
        if kwargs.get(library.cfg_entry_point_key) is not None
    }
    return {
        "env_entry_point": _name(spec.entry_point),
        "cfg_entry_point": _name(cfg_entry_point) if cfg_entry_point is not None else "",
        "observation_size": sizes[0],
        "action_size": sizes[1],
        "default_num_envs": int(num_envs) if num_envs else None,
        "agent_configs": agent_configs,
        "unavailable": kwargs.get(UNAVAILABLE_KEY) or None,
    }


def record_callers() -> dict[str, str]:
    """Task id -> the module whose code called ``gym.register`` for it (from now on). Importing a
    package may import another task package (an env module reused from islab.tasks.cartpole):
    its ids belong to that package, not to the one being probed."""
    import gymnasium
    from gymnasium.envs import registration

    callers: dict[str, str] = {}
    original = registration.register

    def register(id: str, *args: Any, **kwargs: Any) -> Any:
        callers[id] = sys._getframe(1).f_globals.get("__name__", "")
        return original(id, *args, **kwargs)

    gymnasium.register = registration.register = register
    return callers


def _belongs(caller: str | None, package: str) -> bool:
    return caller is None or caller == package or caller.startswith(f"{package}.")


def describe_package(
    package: str, expected: list[str] | None, cache_dir: Path, callers: dict[str, str]
) -> dict[str, Any]:
    import gymnasium

    before = set(gymnasium.registry)
    try:
        # A task's import may print (mjlab's Warp does); stdout carries our JSON only.
        with contextlib.redirect_stdout(io.StringIO()):
            importlib.import_module(package)
    except BaseException as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return {"error": f"importing {package} failed: {last}"}
    new_ids = [task for task in gymnasium.registry if task not in before and _belongs(callers.get(task), package)]
    ids = expected if expected is not None else new_ids
    files: set[str] = set()
    tasks: dict[str, Any] = {}
    for task_id in ids:
        if task_id not in gymnasium.registry:
            return {"error": f"{package} registers no task {task_id!r} (no gym.register(id={task_id!r}, ...))"}
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                tasks[task_id] = describe_task(task_id, cache_dir, files)
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return {"error": f"{task_id}: reading its registration failed: {last}"}
    return {"tasks": tasks, "files": sorted(files)}


def main() -> int:
    request = json.load(sys.stdin)
    sys.path[:] = request["sys_path"]  # the launcher's (``--task-module`` may have added the cwd)
    cache_dir = Path(request["cache_dir"])
    callers = record_callers()
    report = {
        package: describe_package(package, expected, cache_dir, callers)
        for package, expected in request["packages"].items()
    }
    sys.stdout.write(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
