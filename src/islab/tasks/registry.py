"""The task registry: ids from entry-point metadata, everything else from the real registration.

A task is ordinary Isaac Lab-style Python: a package whose ``__init__.py`` calls
``gym.register(id=..., entry_point=..., kwargs={"env_cfg_entry_point": <config class>,
"<lib>_cfg_entry_point": <agent config>})`` with whatever values it computes (sizes, configs,
loops over another registry: mjlab's bridge registers every mjlab task that way). It is announced
in its distribution's metadata, which is all the launcher needs to know it exists::

    [project.entry-points."islab.tasks"]
    "Islab-Cartpole-v0" = "islab.tasks.cartpole"
    "Mjlab-Velocity-Flat-Unitree-Go1" = "islab.tasks.mjlab [mjlab]"   # needs the [mjlab] extra

The extra in brackets (entry-point syntax) names an islab-train extra the task needs; the extra
installs a module of that name, and without it the task is listed but refused before launch.

Sizes, the default number of envs and agent configs come from importing the package, which costs
torch: :mod:`islab.tasks.metadata` does it in a child process when a command needs them
(``islab-train tasks``, the default ``num_envs`` and budget, override checks) and caches the answer
per installed version. A module that is not installed joins with ``--task-module MOD``
(:meth:`TaskTable.add_module`): found from the working directory as ``python -m`` would, read by
the same probe, imported by every rank.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType

from islab.spec.issues import install_extra_hint
from islab.tasks.metadata import Describer, ProbeError

ENTRY_POINT_GROUP = "islab.tasks"


class TaskRegistrationError(ValueError):
    """A task cannot be read: not installed, registers nothing, or its import fails (message says which)."""


@dataclass(frozen=True)
class TaskEntry:
    """What entry-point metadata says about a task: enough to launch it, read without importing."""

    task_id: str
    package: str  # imported by the probe and by ranks ("islab.tasks.cartpole")
    extra: str = ""  # the islab-train extra (= module) it needs, e.g. "mjlab"; "" = none
    distribution: str | None = None  # the installed distribution announcing it; None for --task-module


@dataclass(frozen=True)
class TaskInfo:
    """One task as its real registration describes it (read by :mod:`islab.tasks.probe`)."""

    task_id: str
    package: str
    extra: str = ""
    env_entry_point: str = ""
    cfg_entry_point: str = ""
    agent_configs: Mapping[str, str] = field(default_factory=dict)  # lib -> YAML path
    observation_size: int | None = None
    action_size: int | None = None
    default_num_envs: int | None = None
    unavailable: str | None = None  # why islab cannot train it (registration kwarg ``islab_unavailable``)


def module_file(module: str) -> Path:
    """The source file of ``module`` (a package's ``__init__.py``), found without importing it.

    ``importlib.util.find_spec("a.b")`` would import ``a``; walking the search locations from the
    top-level package does not."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise TaskRegistrationError(
            f"module {module!r} cannot be found: it is not installed and not in the working directory ({Path.cwd()})"
        )
    locations = list(spec.submodule_search_locations or [])
    path = Path(spec.origin) if spec.origin else None
    for part in rest:
        path = next((p for loc in locations for p in _candidates(Path(loc), part) if p.is_file()), None)
        if path is None:
            raise TaskRegistrationError(f"module {module!r} cannot be found (no {part!r} in {locations})")
        locations = [str(path.parent)] if path.name == "__init__.py" else []
    if path is None:
        raise TaskRegistrationError(f"module {module!r} has no source file")
    return path


def _candidates(location: Path, name: str) -> tuple[Path, Path]:
    return location / name / "__init__.py", location / f"{name}.py"


def _source(package: str) -> Path:
    """What the cache fingerprints: a package's folder, or a plain module's file."""
    path = module_file(package)
    return path.parent if path.name == "__init__.py" else path


class TaskTable(Mapping[str, TaskInfo]):
    """Task id -> :class:`TaskInfo`. Iterating, ``in`` and :meth:`entry` read entry points only;
    ``table[task_id]`` reads the registration (cached; see :mod:`islab.tasks.metadata`)."""

    def __init__(self) -> None:
        self._entries: dict[str, TaskEntry] | None = None
        self._modules: list[str] = []  # --task-module packages: ids found by importing them
        self._infos: dict[str, TaskInfo] = {}
        self._errors: dict[str, str] = {}  # package -> why it cannot be read
        self.describer = Describer()

    @property
    def entries(self) -> dict[str, TaskEntry]:
        if self._entries is None:
            self._entries = {}
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                distribution = ep.dist.name if ep.dist is not None else None
                extra = ep.extras[0] if ep.extras else ""
                self._entries[ep.name] = TaskEntry(ep.name, ep.module, extra, distribution)
        return self._entries

    def entry(self, task_id: str) -> TaskEntry:
        return self.entries[task_id]

    def missing_extra(self, task_id: str) -> str | None:
        """The extra ``task_id`` needs when its module is not installed, else None. Checked with
        ``find_spec`` on the top-level module, which imports nothing (mjlab costs torch and Warp)."""
        extra = self.entries[task_id].extra
        return extra if extra and importlib.util.find_spec(extra) is None else None

    def add_module(self, module: str) -> list[str]:
        """Announce the tasks that ``module`` registers (imported by the probe) without installing
        a package; returns their ids. A module may not re-register an installed package's id."""
        source = _source(module)
        if module not in self._modules:
            answer = self.describer.describe({module: (None, (), source)})[module]
            if isinstance(answer, ProbeError):
                raise TaskRegistrationError(f"{answer}; `python -c 'import {module}'` shows the whole traceback")
            if not answer:
                raise TaskRegistrationError(
                    f"{module_file(module)} calls no gym.register(id=..., ...): a task module registers its tasks "
                    "the way Isaac Lab's task packages do"
                )
            for task_id, description in answer.items():
                owner = self.entries.setdefault(task_id, TaskEntry(task_id, module)).package
                if owner != module:
                    raise TaskRegistrationError(f"{module} registers {task_id!r}, which {owner} already registers")
                self._infos[task_id] = _info(self.entries[task_id], description)
            self._modules.append(module)
        return [task_id for task_id, entry in self.entries.items() if entry.package == module]

    def describe(self, task_ids: list[str]) -> None:
        """Read the registrations of ``task_ids`` (one child process for every stale package)."""
        requests = {}
        for task_id in task_ids:
            entry = self.entries[task_id]
            if task_id in self._infos or entry.package in self._errors or self.missing_extra(task_id):
                continue  # known, or known not to import (a missing extra is reported as such)
            announced = [t for t, e in self.entries.items() if e.package == entry.package]
            try:
                source = _source(entry.package)
            except TaskRegistrationError as error:
                self._errors[entry.package] = str(error)
                continue
            requests[entry.package] = (announced, (entry.distribution, entry.extra or None), source)
        for package, answer in self.describer.describe(requests).items():
            if isinstance(answer, ProbeError):
                self._errors[package] = str(answer)
                continue
            for task_id, description in answer.items():
                if task_id in self.entries:
                    self._infos[task_id] = _info(self.entries[task_id], description)

    def problem(self, task_id: str) -> tuple[str, str] | None:
        """Why ``task_id``'s registration cannot be read (its import fails...) and the fix, else None."""
        extra = self.missing_extra(task_id)
        if extra:
            return (
                f"task {task_id} needs the [{extra}] extra, which is not installed (no module {extra!r})",
                install_extra_hint(extra),
            )
        self.describe([task_id])
        if task_id in self._infos:
            return None
        package = self.entries[task_id].package
        why = self._errors.get(package, f"{package} did not register {task_id}")
        return (
            f"task {task_id}: {why}",
            f"Fix the task package {package} (`python -c 'import {package}'` shows the whole traceback)",
        )

    def __getitem__(self, task_id: str) -> TaskInfo:
        problem = self.problem(task_id)
        if problem is not None:
            raise TaskRegistrationError(". ".join(problem))
        return self._infos[task_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.entries


def _info(entry: TaskEntry, description: Mapping[str, object]) -> TaskInfo:
    configs = description.get("agent_configs") or {}
    return TaskInfo(
        task_id=entry.task_id,
        package=entry.package,
        extra=entry.extra,
        env_entry_point=str(description.get("env_entry_point", "")),
        cfg_entry_point=str(description.get("cfg_entry_point", "")),
        agent_configs=MappingProxyType(dict(configs)),  # type: ignore[arg-type]
        observation_size=description.get("observation_size"),  # type: ignore[arg-type]
        action_size=description.get("action_size"),  # type: ignore[arg-type]
        default_num_envs=description.get("default_num_envs"),  # type: ignore[arg-type]
        unavailable=description.get("unavailable"),  # type: ignore[arg-type]
    )


TASKS = TaskTable()


def add_task_module(module: str) -> list[str]:
    """``--task-module``: announce ``module``'s tasks, finding it from the working directory as
    ``python -m`` would. The launcher, ``islab-train tasks`` and every rank call this (torchrun
    and skrl's launcher start the ranks in the launcher's working directory)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return TASKS.add_module(module)


def missing_extra(task_id: str) -> str | None:
    return TASKS.missing_extra(task_id)


def default_num_envs(task_id: str) -> int | None:
    """The task's default number of envs, or None when it cannot be read (the launcher's checks
    then report why: a missing extra, a failing import)."""
    if task_id not in TASKS or missing_extra(task_id) or TASKS.problem(task_id):
        return None
    return TASKS[task_id].default_num_envs


def import_task(task_id: str) -> TaskEntry:
    """On a rank: import the task's package, which registers it with gymnasium."""
    entry = TASKS.entry(task_id)
    importlib.import_module(entry.package)
    return entry
