"""The edge of resolution: every disk read and installation probe the pipeline needs, in one place.

The steps of :mod:`islab.resolve.pipeline` are pure: what they need from the machine they get
from an :class:`Edge` passed in. :class:`DiskEdge` is the real one; a test passes a fake that
answers from memory, so each step runs alone without files on disk.

=========================  ==============================================================
``read_cluster_file``      the ``--cluster`` YAML text
``resumed_run``            ``--resume``: the run directory and its stored spec (launch.yaml)
``isaaclab``               ``--isaaclab auto|DIR``: where Isaac Lab is (its checkout, or the ranks'
                           interpreter asked), its version, trainer and registered tasks
``add_task_module``        ``--task-module``: its tasks join the registry (read statically)
``task_ids``               every task id announced (entry-point metadata and ``--task-module``)
``task_default_envs``      a registered task's default environment count
``checkpoint_exists``      a ``--resume`` path holds a checkpoint (run dir -> latest.pt)
``missing_extra``          the task's extra is installed (checked without importing it)
``module_installed``       e.g. wandb for ``--logger wandb``
``configured_libraries``   which libraries the task has an agent config for
``rollout_problem``        the agent config takes the overrides and gives a rollout length
``rollout_length``         that rollout length, which the planner's budget counts with
``trainer_checkpoint``     ``--resume`` of an Isaac Lab run: its trainer's newest complete checkpoint
``working_directory``      where the ranks start (Isaac Lab 2.x's rsl_rl resumes from ./logs only)
=========================  ==============================================================

What the schema and the planner need of the machine reaches them as the plain values these return
(:mod:`islab.spec.run_spec` says which): they import nothing that reads a task.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from islab import rundir
from islab.resolve.isaaclab_install import DryRunReader, IsaacLabReader
from islab.resolve.resumed import stored_layer
from islab.resolve.sources import read_cluster_file
from islab.rundir.trainer_runs import TrainerCheckpoint, newest_checkpoint
from islab.spec.agent_config import AgentConfigError, load_agent_config
from islab.spec.budget import rollout_length
from islab.tasks import (
    TASKS,
    add_task_module,
    agent_config_path,
    default_num_envs,
    libraries_with_agent_config,
    missing_extra,
)


class Edge(Protocol):
    """What resolution asks of the machine (see the module's table)."""

    isaaclab: Any  # an islab.resolve.isaaclab_install.IsaacLabReader

    def read_cluster_file(self, path: Path) -> str: ...
    def resumed_run(self, resume: Any) -> tuple[Path | None, dict[str, tuple[Any, str]]]: ...
    def add_task_module(self, module: str) -> None: ...
    def task_ids(self) -> Sequence[str]: ...
    def task_default_envs(self, task: str) -> int | None: ...
    def task_problem(self, task: str) -> tuple[str, str] | None: ...
    def checkpoint_exists(self, path: str) -> bool: ...
    def missing_extra(self, task: str) -> str | None: ...
    def module_installed(self, name: str) -> bool: ...
    def configured_libraries(self, task: str) -> Sequence[str]: ...
    def rollout_problem(self, lib: str, task: str, overrides: Sequence[str]) -> AgentConfigError | None: ...
    def rollout_length(self, lib: str, task: str, overrides: Sequence[str]) -> int: ...
    def agent_config_path(self, lib: str, task: str) -> Path: ...
    def trainer_checkpoint(self, run_dir: Path, library: str) -> TrainerCheckpoint | None: ...
    def working_directory(self) -> Path: ...


class DiskEdge:
    """The real edge: this machine's files and installed packages."""

    isaaclab = IsaacLabReader()

    def read_cluster_file(self, path: Path) -> str:
        return read_cluster_file(path)

    def resumed_run(self, resume: Any) -> tuple[Path | None, dict[str, tuple[Any, str]]]:
        """``--resume RUN_DIR`` (or a checkpoint inside one): the run and its stored spec's layer."""
        run_dir = rundir.run_dir_of(resume) if isinstance(resume, str) else None
        return run_dir, (stored_layer(run_dir) if run_dir is not None else {})

    def add_task_module(self, module: str) -> None:
        add_task_module(module)

    def task_ids(self) -> Sequence[str]:
        return tuple(TASKS)  # in the order entry points list them (the "known tasks" hint keeps it)

    def task_default_envs(self, task: str) -> int | None:
        return default_num_envs(task)  # None: the task cannot be read; the disk checks say why

    def task_problem(self, task: str) -> tuple[str, str] | None:
        """(problem, fix) when the task's registration cannot be read or it cannot be trained."""
        problem = TASKS.problem(task)
        if problem is not None:
            return problem
        if TASKS[task].unavailable:
            return (
                f"{task} cannot be trained by islab: {TASKS[task].unavailable}",
                "Choose another task (islab-train tasks lists them)",
            )
        return None

    def checkpoint_exists(self, path: str) -> bool:
        return rundir.resume_source(path).is_file()

    def missing_extra(self, task: str) -> str | None:
        return missing_extra(task)

    def module_installed(self, name: str) -> bool:
        return importlib.util.find_spec(name) is not None

    def configured_libraries(self, task: str) -> Sequence[str]:
        return libraries_with_agent_config(task)

    def rollout_problem(self, lib: str, task: str, overrides: Sequence[str]) -> AgentConfigError | None:
        try:
            self.rollout_length(lib, task, overrides)
        except AgentConfigError as error:
            return error
        return None

    def rollout_length(self, lib: str, task: str, overrides: Sequence[str]) -> int:
        """AgentConfigError when the agent config cannot give one (:meth:`rollout_problem` reports it)."""
        return rollout_length(lib, load_agent_config(lib, task, overrides))

    def agent_config_path(self, lib: str, task: str) -> Path:
        return agent_config_path(lib, task)

    def trainer_checkpoint(self, run_dir: Path, library: str) -> TrainerCheckpoint | None:
        return newest_checkpoint(run_dir, library)

    def working_directory(self) -> Path:
        return Path.cwd()


class DryRunEdge(DiskEdge):
    """A dry run's edge: the same reads, except that ``--isaaclab DIR`` need not be a checkout on
    this machine (:class:`islab.resolve.isaaclab_install.DryRunReader`; ``warnings`` says what was not
    checked)."""

    def __init__(self) -> None:
        self.isaaclab = DryRunReader()

    @property
    def warnings(self) -> list[str]:
        return list(self.isaaclab.unchecked)
