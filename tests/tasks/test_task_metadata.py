"""A task's sizes and agent configs come from its real registration, read in a child process and
cached per installed version (islab.tasks.metadata, islab.tasks.probe).

A task is ordinary Isaac Lab-style Python: the registration below computes its id, sizes and kwargs
(nothing the old ast reader could have read). What must hold: it is listed with the computed values;
a second read starts no child process; editing the task re-reads it; a task whose import fails is
refused with exit 2, naming the task and the fix, and nothing is launched."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from test_task_plugins import islab_train

from islab.tasks.registry import TaskTable

# Computed, not literal: the id from a loop variable, the kwargs from a function, the sizes from
# arithmetic in a config subclass made at import time.
COMPUTED_TASK = """
import dataclasses
import gymnasium as gym

from islab.tasks.cartpole.cartpole_env import CartpoleEnvCfg

JOINTS = 2


@dataclasses.dataclass
class WideCartpoleCfg(CartpoleEnvCfg):
    num_envs: int = 16 * JOINTS


def agent_kwargs(libs):
    return {f"{lib}_cfg_entry_point": f"islab.tasks.cartpole.agents:{lib}_ppo_cfg.yaml" for lib in libs}


for name in ("Wide",):
    gym.register(
        id=f"My-{name}-Cartpole-v0",
        entry_point="islab.tasks.cartpole.cartpole_env:CartpoleEnv",
        kwargs={"env_cfg_entry_point": WideCartpoleCfg, **agent_kwargs(["rsl_rl", "skrl"])},
    )
"""

BROKEN_TASK = """
import gymnasium as gym
import a_module_nobody_installed  # the author's typo
"""


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with the module ``computed_tasks`` and a private cache directory."""
    (tmp_path / "computed_tasks.py").write_text(textwrap.dedent(COMPUTED_TASK))
    (tmp_path / "broken_tasks.py").write_text(textwrap.dedent(BROKEN_TASK))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_computed_registration_is_listed_with_its_values(user_dir: Path) -> None:
    result = islab_train(user_dir, "tasks", "--json", "--task-module", "computed_tasks",
                         env={"XDG_CACHE_HOME": str(user_dir / "cache")})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    row = {row["task"]: row for row in json.loads(result.stdout)}["My-Wide-Cartpole-v0"]
    assert (row["observation_size"], row["action_size"], row["default_num_envs"]) == (4, 1, 32)
    assert row["agent_configs"] == ["rsl_rl", "skrl"] and row["package"] == "computed_tasks"


def test_the_cache_is_used_and_invalidated_when_the_task_changes(user_dir: Path) -> None:
    first = TaskTable()
    assert first.add_module("computed_tasks") == ["My-Wide-Cartpole-v0"]
    assert first.describer.probes == 1 and first["My-Wide-Cartpole-v0"].default_num_envs == 32
    assert list((user_dir / "cache" / "islab-train" / "tasks").glob("computed_tasks-*.json"))

    warm = TaskTable()
    warm.add_module("computed_tasks")
    assert warm.describer.probes == 0, "a warm cache started the probe again"
    assert warm["My-Wide-Cartpole-v0"].default_num_envs == 32

    module = user_dir / "computed_tasks.py"
    module.write_text(module.read_text().replace("JOINTS = 2", "JOINTS = 3"))
    later = time.time() + 5  # a new mtime even on file systems with coarse timestamps
    os.utime(module, (later, later))
    edited = TaskTable()
    edited.add_module("computed_tasks")
    assert edited.describer.probes == 1, "the edited task was read from a stale cache"
    assert edited["My-Wide-Cartpole-v0"].default_num_envs == 48


def test_a_deleted_cache_is_rebuilt(user_dir: Path) -> None:
    TaskTable().add_module("computed_tasks")
    for path in (user_dir / "cache" / "islab-train" / "tasks").glob("*.json"):
        path.unlink()
    again = TaskTable()
    again.add_module("computed_tasks")
    assert again.describer.probes == 1 and again["My-Wide-Cartpole-v0"].observation_size == 4


def test_a_task_whose_import_fails_is_refused_before_launch(user_dir: Path) -> None:
    result = islab_train(
        user_dir, "--task-module", "broken_tasks", "--task", "My-Wide-Cartpole-v0", "--device", "cpu",
        "--nproc", "1", "--log-dir", str(user_dir / "logs"), "--max-iterations", "1",
        env={"XDG_CACHE_HOME": str(user_dir / "cache")},
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1 and message.startswith("error: task_module"), message
    for words in ("importing broken_tasks failed", "a_module_nobody_installed", "python -c 'import broken_tasks'"):
        assert words in message, (words, message)
    assert not (user_dir / "logs").exists(), "a refused launch created a run directory"


def test_an_installed_task_whose_import_fails_names_the_task_and_the_fix(user_dir: Path, islab, monkeypatch) -> None:
    """An entry point names the package; its import fails only when the probe imports it."""
    from islab.tasks import TASKS
    from islab.tasks.registry import TaskEntry

    broken = TaskEntry("Acme-Broken-v0", "broken_tasks", "", None)
    monkeypatch.setattr(TASKS, "_entries", {**TASKS.entries, broken.task_id: broken})
    code, out, err = islab("--task", broken.task_id, "--device", "cpu", "--nproc", "1", "--max-iterations", "1",
                           "--log-dir", str(user_dir / "logs"))  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: task (--task): task Acme-Broken-v0: importing broken_tasks failed"), err
    assert "a_module_nobody_installed" in err and "Fix the task package broken_tasks" in err
    assert not (user_dir / "logs").exists(), "a refused launch created a run directory"
    assert not list((user_dir / "cache" / "islab-train" / "tasks").glob("broken_tasks-*.json")), "a failure was cached"
