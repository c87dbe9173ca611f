"""mjlab's robot tasks (the ``[mjlab]`` extra), found without importing mjlab.

mjlab (PyPI ``mjlab``) is Isaac Lab's manager-based API on MuJoCo Warp. Its tasks register
themselves at import time (``register_mjlab_task(task_id="Mjlab-...", env_cfg=..., rl_cfg=...)``
in ``mjlab/tasks/**/__init__.py``, plus third-party packages under the ``mjlab.tasks`` entry-point
group), and importing mjlab costs torch, Warp and every task's config: 5 s on an idle machine,
30 s on a busy one. The launcher must stay torch-free, so ``mjlab_task_ids()`` reads the
``register_mjlab_task(task_id="...")`` calls statically (``ast``) from the installed source
files: about 20 ms, nothing imported. The worker builds the env with mjlab itself
(``islab.envs.mjlab_env``).

Agent configs live beside this file, one folder per task family, in each library's own format:
``agents/<folder>/{rsl_rl,rl_games,skrl}_ppo_cfg.yaml``. rsl_rl's is mjlab's own registered runner
config written out by ``python -m islab.mjlab_tasks.export_rsl_rl TASK`` (a test checks the file
still equals what the installed mjlab registers); rl_games' and skrl's start from Isaac Lab's
configs for the same robots (each file says what changed and why). A task without a folder is
listed but has no agent config, so the launcher refuses it before anything starts.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

AGENTS_DIR = Path(__file__).with_name("agents")
AGENT_CONFIG_FILE = "{lib}_ppo_cfg.yaml"

# Task id -> agents/<folder>. Flat and rough variants differ in terrain, not in what the policy
# needs, but Isaac Lab tunes them separately; only the flat ones have configs here.
AGENT_FOLDERS: dict[str, str] = {
    "Mjlab-Cartpole-Balance": "cartpole",
    "Mjlab-Cartpole-Swingup": "cartpole",
    "Mjlab-Velocity-Flat-Unitree-Go1": "go1_flat",
    "Mjlab-Velocity-Flat-Unitree-G1": "g1_flat",
}

# Envs per rank when --num-envs is not given: mjlab's own default is 4096 per GPU, far too many
# for a CPU rank (Go1 steps at ~100-200 env steps/s per core).
DEFAULT_NUM_ENVS = 64

# (actor observation size, action size) of the tasks with agent configs, for `islab-train tasks`
# (the launcher cannot build the env to ask); a test checks them against the real envs.
KNOWN_SIZES: dict[str, tuple[int, int]] = {
    "Mjlab-Cartpole-Balance": (5, 1),
    "Mjlab-Cartpole-Swingup": (5, 1),
    "Mjlab-Velocity-Flat-Unitree-Go1": (48, 12),
    "Mjlab-Velocity-Flat-Unitree-G1": (99, 29),
}

# mjlab's observation groups -> ours. Our env contract (Isaac Lab's) names the actor's group
# "policy"; the critic's (privileged) group keeps its name, which skrl reads as the state.
GROUP_NAMES = {"actor": "policy", "critic": "critic"}


def is_mjlab_task(task_id: str) -> bool:
    return task_id in mjlab_task_ids()


def _source_roots() -> list[Path]:
    """Directories holding task registrations: mjlab's own tasks/ and every package that mjlab's
    ``mjlab.tasks`` entry-point group names (found by spec, never imported)."""
    roots: list[Path] = []
    spec = importlib.util.find_spec("mjlab")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        return roots
    roots += [Path(location) / "tasks" for location in spec.submodule_search_locations]
    for entry in entry_points(group="mjlab.tasks"):
        top = entry.value.split(":")[0].split(".")[0]
        found = importlib.util.find_spec(top)
        if found is not None and found.submodule_search_locations:
            roots += [Path(location) for location in found.submodule_search_locations]
    return roots


def registered_ids(source: str) -> list[str]:
    """The literal ``task_id`` of every ``register_mjlab_task(...)`` call in ``source``."""
    ids: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name != "register_mjlab_task":
            continue
        arguments = [kw.value for kw in node.keywords if kw.arg == "task_id"] + node.args[:1]
        if arguments and isinstance(arguments[0], ast.Constant) and isinstance(arguments[0].value, str):
            ids.append(arguments[0].value)
    return ids


@functools.cache
def mjlab_task_ids() -> tuple[str, ...]:
    """Every task id the installed mjlab (and its task plug-ins) registers; () without mjlab."""
    ids: set[str] = set()
    for root in _source_roots():
        for path in root.rglob("*.py"):
            try:
                text = path.read_text(encoding="utf-8")
            except OSError:
                continue
            if "register_mjlab_task" in text:
                ids.update(registered_ids(text))
    return tuple(sorted(ids))


def agent_config_path(lib: str, task_id: str) -> Path:
    """Where ``lib``'s config for ``task_id`` lives (the path may not exist: no config; a task
    without a folder points at ``agents/<task id>/``, where one would go)."""
    folder = AGENT_FOLDERS.get(task_id, task_id)
    return AGENTS_DIR / folder / AGENT_CONFIG_FILE.format(lib=lib)
