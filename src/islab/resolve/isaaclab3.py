"""The ``--isaaclab`` preset for Isaac Lab 3: each rank runs exactly what ``isaaclab train_multigpu`` runs.

Isaac Lab 3.0's multi-GPU launcher (``isaaclab/cli/multigpu.py``, configured by
``isaaclab_rl/entrypoints/multigpu.py``) builds, for every rank::

    <isaaclab_rl>/entrypoints/multigpu.py --rl_library L <the user's arguments> \
        --run_timestamp=<launch time> --distributed

under torchrun (or skrl's JAX launcher when the arguments hold ``--ml_framework jax``). That file's
``__main__`` is the per-rank trainer, ``record(run_train_cli)``: torch's ``record`` writes a failing
rank's traceback to torchrun's error file. ``--run_timestamp`` names the run folder, so every rank
writes one folder (ranks >= 1 under ``rank_<r>/``); the launcher adds it unless the user gave one
(``run_train_multigpu_cli``). ``--distributed`` is appended unless present (``worker_flags``).
Isaac Lab 3 has no ``--headless``: it runs without a window unless ``--viz ...`` asks for one.

The preset writes that argv from islab's options: ``--task``, ``--num_envs``, ``--seed``,
``--max_iterations`` (the unified trainer's own names, ``isaaclab_rl/entrypoints/common.py``
``add_common_train_args``), ``--ml_framework jax`` for skrl-JAX, then the trailing ``KEY=VALUE``
arguments (Hydra overrides: ``presets=...``, ``physics=...``, ``env.…``, ``agent.…``) and what follows
``--`` verbatim. The run timestamp is the launch time, so the planner adds it
(:func:`with_run_timestamp`): resolution has no clock.

**One CPU rank.** Under ``--distributed`` Isaac Lab moves the simulation to ``cuda:<local rank>``
(``isaaclab/app/sim_launcher.py``) and refuses a CPU device (``validate_distributed_device``), so a
CPU run is one rank without ``--distributed``, with ``--device cpu`` and the agent-config keys that
name the learner's device for libraries that do not follow the environment's
(:data:`CPU_AGENT_OVERRIDES`; a key the user gives wins).

Pure functions: the launcher imports this module; where Isaac Lab is comes from
:mod:`islab.resolve.isaaclab_install`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from islab.resolve.isaaclab import PresetEntry, closest_task_id, trainer_flags
from islab.resolve.isaaclab_renames import renamed_task

ENTRY_FILE = PurePath("isaaclab_rl", "entrypoints", "multigpu.py")  # below the package's parent
RUN_TIMESTAMP = "--run_timestamp"
RUN_TIMESTAMP_FORMAT = "%Y-%m-%d_%H-%M-%S"  # run_train_multigpu_cli's, for the launch time
LIBRARIES = ("rl_games", "rsl_rl", "skrl")  # MULTI_GPU_BACKENDS (isaaclab_rl/entrypoints/api.py)
# Agent-config keys that put the learner on the CPU: rsl_rl's runner and rl_games' config read their
# own device (cuda:0 in the shipped configs); skrl's agent follows the environment's device.
CPU_AGENT_OVERRIDES: dict[str, tuple[str, ...]] = {
    "rsl_rl": ("agent.device=cpu",),
    "rl_games": ("agent.params.config.device=cpu", "agent.params.config.device_name=cpu"),
    "skrl": (),
}


@dataclass(frozen=True)
class IsaacLab3:
    """An Isaac Lab 3 found on this machine: what every rank runs and where its tasks register."""

    version: str  # "3.0.0": the checkout's VERSION file or the installed package's metadata
    entry: Path  # <isaaclab_rl>/entrypoints/multigpu.py, as Isaac Lab's launcher names it (absolute)
    task_dirs: tuple[Path, ...]  # packages whose __init__ files call gym.register
    where: str  # for messages: "isaaclab 3.0.0 in /venv/bin/python" or the checkout


def is_isaaclab3_entry(script: str | PurePath) -> bool:
    """Whether a rank's script is Isaac Lab 3's per-rank trainer (the planner adds the run timestamp)."""
    return PurePath(script).parts[-len(ENTRY_FILE.parts) :] == ENTRY_FILE.parts


def isaaclab3_entry(
    install: IsaacLab3,
    library: str,
    ml_framework: str = "torch",
    *,
    task: str,
    num_envs: int | None = None,
    seed: int | None = None,
    max_iterations: int | None = None,
    overrides: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    cpu: bool = False,
) -> PresetEntry:
    """The per-rank argv of ``isaaclab train_multigpu`` for these options (see the module docstring),
    without the run timestamp. ``cpu``: one CPU rank (no ``--distributed``)."""
    args = ["--rl_library", library, "--task", task, *trainer_flags(num_envs, seed, max_iterations)]
    given = {_key_of(arg) for arg in (*overrides, *extra_args)}
    if cpu:
        args += ["--device", "cpu", *(item for item in CPU_AGENT_OVERRIDES[library] if _key_of(item) not in given)]
    if ml_framework == "jax":
        args += ["--ml_framework", "jax"]
    args += [*overrides, *extra_args]
    if not cpu and "--distributed" not in args:
        args.append("--distributed")
    return PresetEntry(install.entry, tuple(args))


def _key_of(argument: str) -> str:
    return argument.partition("=")[0] if "=" in argument and not argument.startswith("-") else ""


def with_run_timestamp(args: Sequence[str], stamp: str) -> tuple[str, ...]:
    """``args`` with ``--run_timestamp=STAMP`` where Isaac Lab's launcher puts it (after the user's
    arguments, before the trailing ``--distributed``); unchanged when the user gave one."""
    if any(arg == RUN_TIMESTAMP or arg.startswith(f"{RUN_TIMESTAMP}=") for arg in args):
        return tuple(args)
    cut = len(args) - 1 if args and args[-1] == "--distributed" else len(args)
    return (*args[:cut], f"{RUN_TIMESTAMP}={stamp}", *args[cut:])


def unknown_task3_problem(task: str, install: IsaacLab3, registered: Sequence[str]) -> str | None:
    """``<problem>. <fix>`` when Isaac Lab 3's registrations do not hold ``task``; None when they do,
    when none could be read, or for ``module:Task`` (Isaac Lab imports the module first, then looks
    the id up)."""
    if ":" in task or not registered or task in registered:
        return None
    renamed = renamed_task(task, registered)
    if renamed is not None:
        hint = f"Did you mean {renamed}? Isaac Lab 3 renamed its tasks (no -v0 ids, no aliases)"
    else:
        closest = closest_task_id(task, registered)
        hint = f"Did you mean {closest}?" if closest else f"Registered ids include {', '.join(registered[:5])}"
    return f"{task} is not a task of Isaac Lab {install.version} ({install.where}). {hint}"
