"""Reading task registrations without importing them (torch-, numpy- and gymnasium-free).

A task is a package that registers itself with gymnasium the way Isaac Lab's tasks do: its
``__init__.py`` calls ``gym.register(id=..., entry_point=f"{__name__}.<name>_env:<Name>Env",
kwargs={"env_cfg_entry_point": ..., "<lib>_cfg_entry_point": f"{agents.__name__}:<file>.yaml"})``
(``islab/tasks/cartpole/__init__.py`` is the example to copy), and is announced in its
distribution's metadata, so nothing has to be imported to list it::

    [project.entry-points."islab.tasks"]
    "Islab-Cartpole-v0" = "islab.tasks.cartpole"

A module that is not installed joins with ``--task-module MOD`` (:meth:`TaskTable.add_module`): it
is looked up from the working directory as ``python -m`` would, and every rank imports it too.

The launcher must validate ``--task`` and show ``islab-train tasks`` before torch is imported, but
importing a task package imports gymnasium and its env module imports torch. So this module
parses the package's ``__init__.py`` with :mod:`ast` instead: the ``register`` call's literal
arguments, with the f-strings ``{__name__}`` and ``{<imported module>.__name__}`` resolved. The
observation and action sizes and the default number of envs are the env config class's literal
``observation_space``, ``action_space`` and ``num_envs`` (Isaac Lab's names). A rank imports the
package for real (:func:`import_task`), which runs the same ``gym.register``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType
from typing import Any

ENTRY_POINT_GROUP = "islab.tasks"
ENV_CFG_KEY = "env_cfg_entry_point"
EXTRA_KEY = "islab_extra"  # an islab-train extra the task needs; the extra installs a module of that name


class TaskRegistrationError(ValueError):
    """A task package's registration cannot be read statically; the message says what to change."""


@dataclass(frozen=True)
class TaskInfo:
    """One registered task, as its package declares it."""

    task_id: str
    package: str  # the task package ("islab.tasks.cartpole"), imported by ranks
    env_entry_point: str  # "module:Class" of the DirectRLEnv subclass
    cfg_entry_point: str  # "module:Class" of its config dataclass
    agent_configs: Mapping[str, str] = field(default_factory=dict)  # "<lib>_cfg_entry_point" -> "pkg:file.yaml"
    observation_size: int = 0
    action_size: int = 0
    default_num_envs: int = 0
    extra: str = ""  # the islab-train extra (= module) the task needs, e.g. "mjlab"; "" = none


# -- locating source files without importing -----------------------------------------------------


def module_file(module: str) -> Path:
    """The source file of ``module`` (a package's ``__init__.py``), found without importing it.

    ``importlib.util.find_spec("a.b")`` would import ``a``; walking the search locations from the
    top-level package does not."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise TaskRegistrationError(f"module {module!r} is not installed")
    locations = list(spec.submodule_search_locations or [])
    path = Path(spec.origin) if spec.origin else None
    for part in rest:
        path = next((p for loc in locations for p in _candidates(Path(loc), part) if p.is_file()), None)
        if path is None:
            raise TaskRegistrationError(f"module {module!r} is not installed (no {part!r} in {locations})")
        locations = [str(path.parent)] if path.name == "__init__.py" else []
    if path is None:
        raise TaskRegistrationError(f"module {module!r} has no source file")
    return path


def _candidates(location: Path, name: str) -> tuple[Path, Path]:
    return location / name / "__init__.py", location / f"{name}.py"


def resource_path(spec: str) -> Path:
    """``"package:file.yaml"`` (Isaac Lab's agent-config entry points) as a file path."""
    package, _, name = spec.partition(":")
    return module_file(package).parent / name


# -- reading a register() call -------------------------------------------------------------------


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _module_names(tree: ast.Module, package: str) -> dict[str, str]:
    """Names bound by imports in a package's ``__init__.py`` -> full module names."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:  # "from . import agents" / "from .sub import x"
                base = f"{package}.{node.module}" if node.module else package
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                names[bound] = alias.name if alias.asname else bound
    return names


def _literal(node: ast.AST, package: str, names: Mapping[str, str], where: str) -> Any:
    """A literal, an f-string over ``__name__`` / ``<module>.__name__``, or a dict of those."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {
            _literal(key, package, names, where): _literal(value, package, names, where)
            for key, value in zip(node.keys, node.values, strict=True)
            if key is not None
        }
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                parts.append(_literal(value.value, package, names, where))
            else:
                parts.append(_literal(value, package, names, where))
        return "".join(str(part) for part in parts)
    if isinstance(node, ast.Name) and node.id == "__name__":
        return package
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "__name__"
        and isinstance(node.value, ast.Name)
        and node.value.id in names
    ):
        return names[node.value.id]
    raise TaskRegistrationError(
        f"{where}: line {getattr(node, 'lineno', '?')}: gym.register arguments must be literals or f-strings "
        "over __name__ / <imported module>.__name__, so the launcher can read them without importing the task"
    )


def registrations(package: str) -> dict[str, dict[str, Any]]:
    """Every ``register(id=..., ...)`` call in ``package``'s ``__init__.py``: id -> its arguments."""
    path = module_file(package)
    tree = _parse(path)
    names = _module_names(tree, package)
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called_name(node.func) == "register"):
            continue
        arguments = {kw.arg: _literal(kw.value, package, names, str(path)) for kw in node.keywords if kw.arg}
        if isinstance(arguments.get("id"), str):
            found[arguments["id"]] = arguments
    return found


def _called_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def class_literals(entry_point: str) -> dict[str, Any]:
    """The literal class attributes of ``"module:Class"`` (and of its bases in the same module)."""
    module, _, class_name = entry_point.partition(":")
    tree = _parse(module_file(module))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    values: dict[str, Any] = {}
    chain: list[ast.ClassDef] = []
    current = classes.get(class_name)
    while current is not None and current not in chain:
        chain.append(current)
        base = current.bases[0] if current.bases else None
        current = classes.get(base.id) if isinstance(base, ast.Name) else None
    for cls in reversed(chain):  # the subclass's values win
        for statement in cls.body:
            target = statement.target if isinstance(statement, ast.AnnAssign) else None
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
            value = getattr(statement, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
                values[target.id] = value.value
    return values


def read_task(task_id: str, package: str) -> TaskInfo:
    """``task_id``'s registration in ``package``, statically."""
    found = registrations(package)
    if task_id not in found:
        raise TaskRegistrationError(
            f"task {task_id!r}: {module_file(package)} has no gym.register(id={task_id!r}, ...); "
            f"the entry point in group {ENTRY_POINT_GROUP!r} must name the package that registers it"
        )
    arguments = found[task_id]
    kwargs = dict(arguments.get("kwargs") or {})
    cfg_entry_point = kwargs.pop(ENV_CFG_KEY, "")
    extra = str(kwargs.pop(EXTRA_KEY, ""))
    literals = class_literals(cfg_entry_point) if cfg_entry_point else {}
    return TaskInfo(
        task_id=task_id,
        package=package,
        env_entry_point=str(arguments.get("entry_point", "")),
        cfg_entry_point=cfg_entry_point,
        agent_configs=MappingProxyType({k: v for k, v in kwargs.items() if k.endswith("_cfg_entry_point")}),
        observation_size=int(literals.get("observation_space", 0)),
        action_size=int(literals.get("action_space", 0)),
        default_num_envs=int(literals.get("num_envs", 0)),
        extra=extra,
    )


class TaskTable(Mapping[str, TaskInfo]):
    """Task id -> :class:`TaskInfo`, from the ``islab.tasks`` entry points of every installed
    distribution, plus the tasks of modules added with :meth:`add_module` (``--task-module``);
    each registration is read the first time it is asked for."""

    def __init__(self) -> None:
        self._packages: dict[str, str] | None = None
        self._infos: dict[str, TaskInfo] = {}

    @property
    def packages(self) -> dict[str, str]:
        if self._packages is None:
            self._packages = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
        return self._packages

    def add_module(self, module: str) -> list[str]:
        """Announce the tasks that ``module`` registers (read statically) without installing a
        package; returns their ids. An id that an installed package registers too stays with the
        package is an error: a stray module must not shadow a task."""
        ids = list(registrations(module))
        if not ids:
            raise TaskRegistrationError(
                f"{module_file(module)} calls no gym.register(id=..., ...): a task module registers its tasks "
                "the way Isaac Lab's task packages do"
            )
        for task_id in ids:
            owner = self.packages.setdefault(task_id, module)
            if owner != module:
                raise TaskRegistrationError(f"{module} registers {task_id!r}, which {owner} already registers")
        return ids

    def __getitem__(self, task_id: str) -> TaskInfo:
        if task_id not in self._infos:
            self._infos[task_id] = read_task(task_id, self.packages[task_id])
        return self._infos[task_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.packages)

    def __len__(self) -> int:
        return len(self.packages)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.packages


TASKS = TaskTable()


def add_task_module(module: str) -> list[str]:
    """``--task-module``: announce ``module``'s tasks, finding it from the working directory as
    ``python -m`` would. The launcher, ``islab-train tasks`` and every rank call this (torchrun
    and skrl's launcher start the ranks in the launcher's working directory)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return TASKS.add_module(module)


def missing_extra(task_id: str) -> str | None:
    """The extra ``task_id`` needs when its module is not installed, else None. Checked with
    ``find_spec`` on the top-level module, which imports nothing (mjlab costs torch and Warp)."""
    extra = TASKS[task_id].extra
    return extra if extra and importlib.util.find_spec(extra) is None else None


def import_task(task_id: str) -> TaskInfo:
    """On a rank: import the task's package, which registers it with gymnasium."""
    info = TASKS[task_id]
    importlib.import_module(info.package)
    return info
