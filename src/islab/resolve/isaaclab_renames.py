"""Isaac Lab 3's task renames, for "did you mean": an id a user remembers from Isaac Lab 2 (or an early
3.0 build) -> the id Isaac Lab 3 registers.

Isaac Lab 3.0 removed the ``-v0`` ids without aliases (``isaaclab_tasks`` CHANGELOG, releases 5.0.0 to
8.0.0 of the extension, shipped in isaaclab 3.0.0 as ``source/isaaclab_tasks/docs/CHANGELOG.rst``):

* :data:`RENAMES` -- every ``old`` -> ``new`` pair that changelog lists one by one (a pair may lead to
  another: ``Isaac-Velocity-Rough-Anymal-C-v0`` -> ``Isaac-Velocity-Rough-AnymalC-v0`` ->
  ``IsaacContrib-Velocity-Rough-AnymalC``);
* the renames it states as rules: robot names of several words written in CamelCase
  (:data:`CAMEL_CASE_ROBOTS`), the ``-v0`` suffix dropped, the ``-Play`` ids removed (a training id
  plays with ``play_mode``), contributed tasks under ``IsaacContrib-`` instead of ``Isaac-``.

:func:`renamed_task` applies them, fewest steps first, until an id is registered. Pure; the table is
checked against the installed changelog in ``tests/isaaclab3``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

RENAMES: dict[str, str] = {
    "Isaac-Velocity-Rough-AnymalC-v0": "IsaacContrib-Velocity-Rough-AnymalC",
    "Isaac-Cartpole-Showcase-Direct": "IsaacContrib-Cartpole-Showcase-Direct",
    "Isaac-Dexsuite-Kuka-Allegro-Reorient-v0": "Isaac-Reorient-KukaAllegro",
    "Isaac-Dexsuite-Kuka-Allegro-Reorient-Play-v0": "Isaac-Reorient-KukaAllegro-Play",
    "Isaac-Dexsuite-Kuka-Allegro-Lift-v0": "Isaac-Lift-KukaAllegro",
    "Isaac-Dexsuite-Kuka-Allegro-Lift-Play-v0": "Isaac-Lift-KukaAllegro-Play",
    "Isaac-Velocity-Flat-Anymal-D-v0": "Isaac-Velocity-Flat-AnymalD",
    "Isaac-Velocity-Flat-Unitree-Go2-v0": "Isaac-Velocity-Flat-UnitreeGo2",
    "Isaac-Velocity-Rough-Anymal-C-v0": "Isaac-Velocity-Rough-AnymalC-v0",
    "Isaac-Reach-OpenArm-Bi-v0": "Isaac-Reach-OpenArmBi-v0",
    "Isaac-Repose-Cube-Allegro-v0": "Isaac-Reorient-Cube-Allegro",
    "Isaac-Repose-Cube-Allegro-Play-v0": "Isaac-Reorient-Cube-Allegro-Play",
    "Isaac-Repose-Cube-Allegro-Direct-v0": "Isaac-Reorient-Cube-Allegro-Direct",
    "Isaac-Repose-Cube-Shadow-Direct-v0": "Isaac-Reorient-Cube-Shadow-Direct",
    "Isaac-Repose-Cube-Shadow-OpenAI-FF-Direct-v0": "Isaac-Reorient-Cube-Shadow-OpenAI-FF-Direct",
    "Isaac-Repose-Cube-Shadow-OpenAI-LSTM-Direct-v0": "Isaac-Reorient-Cube-Shadow-OpenAI-LSTM-Direct",
    "Isaac-Repose-Cube-Shadow-Vision-Direct-v0": "Isaac-Reorient-Cube-Shadow-Camera-Direct",
    "Isaac-Repose-Cube-Shadow-Vision-Direct-Play-v0": "Isaac-Reorient-Cube-Shadow-Camera-Direct-Play",
    "Isaac-Repose-Cube-Shadow-Vision-Benchmark-Direct-v0": "Isaac-Reorient-Cube-Shadow-Camera-Benchmark-Direct",
    "Isaac-Shadow-Hand-Over-Direct-v0": "Isaac-Shadow-Handover-Direct",
    "Isaac-Open-Drawer-Franka-v0": "Isaac-Open-Drawer-Franka",
    "Isaac-Open-Drawer-Franka-Play-v0": "Isaac-Open-Drawer-Franka-Play",
    "Isaac-Franka-Cabinet-Direct-v0": "Isaac-Open-Drawer-Franka-Direct",
    "Isaac-Lift-Cube-Franka-v0": "Isaac-Lift-Cube-Franka",
    "Isaac-Lift-Cube-Franka-Play-v0": "Isaac-Lift-Cube-Franka-Play",
    "Isaac-Lift-Soft-Franka-v0": "Isaac-Lift-Soft-Franka",
    "Isaac-Lift-Cloth-Franka-v0": "Isaac-Lift-Cloth-Franka",
    "Isaac-Reach-Franka-v0": "Isaac-Reach-Franka",
    "Isaac-Reach-Franka-Play-v0": "Isaac-Reach-Franka-Play",
    "Isaac-Reach-Franka-OSC-v0": "Isaac-Reach-Franka-OSC",
    "Isaac-Reach-Franka-OSC-Play-v0": "Isaac-Reach-Franka-OSC-Play",
    "Isaac-Reach-UR10-v0": "Isaac-Reach-UR10",
    "Isaac-Reach-UR10-Play-v0": "Isaac-Reach-UR10-Play",
    "Isaac-Ant-Direct-v0": "Isaac-Ant-Direct",
    "Isaac-Ant-v0": "Isaac-Ant",
    "Isaac-Humanoid-Direct-v0": "Isaac-Humanoid-Direct",
    "Isaac-Humanoid-v0": "Isaac-Humanoid",
    "Isaac-Cart-Double-Pendulum-Direct-v0": "Isaac-Cart-Double-Pendulum-Direct",
    "Isaac-Cartpole-Manager": "Isaac-Cartpole",
    "Isaac-Cartpole-Camera-Manager": "Isaac-Cartpole-Camera",
    "Isaac-Cartpole-Direct-v0": "Isaac-Cartpole-Direct",
    "Isaac-Cartpole-Camera-Direct-v0": "Isaac-Cartpole-Camera-Direct",
    "Isaac-Cartpole-v0": "Isaac-Cartpole",
    "Isaac-Cartpole-Camera-v0": "Isaac-Cartpole-Camera",
    "Isaac-Cartpole-Showcase-Direct-v0": "Isaac-Cartpole-Showcase-Direct",
    "Isaac-Cartpole-Camera-Showcase-Direct-v0": "Isaac-Cartpole-Camera-Showcase-Direct",
}

# "Multi-word robot names in Gym environment IDs are now written in CamelCase" (extension 7.0.0).
CAMEL_CASE_ROBOTS: dict[str, str] = {
    "Anymal-B": "AnymalB", "Anymal-C": "AnymalC", "Anymal-D": "AnymalD", "Unitree-A1": "UnitreeA1",
    "Unitree-Go1": "UnitreeGo1", "Unitree-Go2": "UnitreeGo2", "Kuka-Allegro": "KukaAllegro", "OpenArm-Bi": "OpenArmBi",
}  # fmt: skip


def _listed(task: str) -> str:
    return RENAMES.get(task, task)


_ROBOT_WORDS = re.compile("(?<=-)(" + "|".join(map(re.escape, CAMEL_CASE_ROBOTS)) + ")(?=-|$)")


def _camel_case(task: str) -> str:
    return _ROBOT_WORDS.sub(lambda match: CAMEL_CASE_ROBOTS[match.group(1)], task)


def _without_suffix(suffix: str) -> Callable[[str], str]:
    return lambda task: task.removesuffix(suffix)


def _contributed(task: str) -> str:
    return "IsaacContrib-" + task.removeprefix("Isaac-") if task.startswith("Isaac-") else task


# Each step rewrites an id one way; -Play goes after -v0 (the old play ids end in -Play-v0).
STEPS: tuple[Callable[[str], str], ...] = (
    _listed, _camel_case, _without_suffix("-v0"), _without_suffix("-Play"), _contributed,
)  # fmt: skip


def renamed_task(task: str, registered: Collection[str]) -> str | None:
    """The registered id ``task`` became under Isaac Lab 3's renames (fewest rewrites first), or None."""
    known = set(registered)
    frontier, seen = [task], {task}
    while frontier:
        following = []
        for name in frontier:
            for step in STEPS:
                new = step(name)
                if new in seen:
                    continue
                if new in known:
                    return new
                seen.add(new)
                following.append(new)
        frontier = following
    return None
