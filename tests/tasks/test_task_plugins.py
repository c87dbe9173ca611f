"""Your own tasks in our worker: a module named with ``--task-module`` (not installed) and an
installed package announced under the ``islab.tasks`` entry-point group (examples/external_task).

The launcher process stays free of torch, numpy and gymnasium (a child process reads the
registrations, see tests/tasks/test_task_metadata.py); every rank imports them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from child_env import child_env
from paths import REPO
from training_runs import PATHS

ROOT = REPO
EXAMPLE = ROOT / "examples" / "external_task"
ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]

# A task module as a user would write it beside their script: Isaac Lab's registration, reusing
# the Cartpole env, with an rsl_rl agent config only.
TASK_MODULE = """
import gymnasium as gym

gym.register(
    id="My-Cartpole-v0",
    entry_point="islab.tasks.cartpole.cartpole_env:CartpoleEnv",
    disable_env_checker=True,
    kwargs={
        "env_cfg_entry_point": "islab.tasks.cartpole.cartpole_env:CartpoleEnvCfg",
        "rsl_rl_cfg_entry_point": "islab.tasks.cartpole.agents:rsl_rl_ppo_cfg.yaml",
    },
)
"""


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A working directory holding the package ``my_tasks.reach`` (not installed anywhere)."""
    package = tmp_path / "my_tasks" / "reach"
    package.mkdir(parents=True)
    (tmp_path / "my_tasks" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(textwrap.dedent(TASK_MODULE))
    (tmp_path / "my_tasks" / "empty.py").write_text("VALUE = 1\n")
    return tmp_path


def islab_train(cwd: Path, *args: str, env: dict[str, str] | None = None, importtime: bool = False):
    environment = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    environment.update(env or {})
    python = [sys.executable, "-X", "importtime"] if importtime else [sys.executable]
    return subprocess.run(
        [*python, "-m", "islab.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=environment
    )


def imported_modules(stderr: str) -> set[str]:
    lines = (line for line in stderr.splitlines() if line.startswith("import time:"))
    return {line.split("|")[-1].strip().split(".")[0] for line in lines}


def test_a_task_module_is_planned_for_every_rank_without_importing_it(user_dir: Path) -> None:
    result = islab_train(
        user_dir, "--task-module", "my_tasks.reach", "--task", "My-Cartpole-v0", "--device", "cpu", "--nproc", "2",
        "--dry-run", "--json", importtime=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    argv = json.loads(result.stdout)["nodes"][0]["argv"]
    assert argv[argv.index("--task") + 1] == "My-Cartpole-v0"
    assert argv[argv.index("--task-module") + 1] == "my_tasks.reach", "the ranks would not know the task"
    imported = imported_modules(result.stderr)
    assert "my_tasks" not in imported, "the launcher process imported the task module (only the probe may)"
    assert imported.isdisjoint({"torch", "numpy", "gymnasium"})


def test_tasks_lists_a_task_module_with_its_package_and_agent_configs(user_dir: Path) -> None:
    result = islab_train(user_dir, "tasks", "--json", "--task-module", "my_tasks.reach")
    assert result.returncode == 0, result.stderr
    rows = {row["task"]: row for row in json.loads(result.stdout)}
    assert rows["My-Cartpole-v0"]["package"] == "my_tasks.reach"
    assert rows["My-Cartpole-v0"]["agent_configs"] == ["rsl_rl"]
    assert rows["Islab-Cartpole-v0"]["package"] == "islab.tasks.cartpole"
    assert rows["Islab-Quadcopter-v0"]["package"] == "islab.tasks.quadcopter"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--task-module", "my_tasks.nowhere", "--task", "My-Cartpole-v0"), ("task_module", "my_tasks.nowhere")),
        (("--task-module", "my_tasks.empty", "--task", "My-Cartpole-v0"), ("task_module", "gym.register")),
        (("--task-module", "my_tasks/reach.py", "--task", "My-Cartpole-v0"), ("task_module", "not a module name")),
        (("--task", "My-Cartpole-v0"), ("task", "unknown task")),
        (("--task-module", "my_tasks.reach", "--task", "My-Cartpole-v0", "--lib", "rl_games"),
         ("lib", "no rl_games agent config", "it has: rsl_rl", "rl_games_cfg_entry_point")),
    ],
    ids=["missing-module", "registers-nothing", "a-path", "not-announced", "no-config-for-lib"],
)  # fmt: skip
def test_bad_task_plugins_are_refused_before_launch(user_dir: Path, args: tuple[str, ...], words: tuple[str, ...]):
    result = islab_train(
        user_dir, *args, "--device", "cpu", "--nproc", "2", "--log-dir", str(user_dir / "logs"), "--max-iterations", "1"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.strip()
    assert all(line.startswith("error: ") for line in message.splitlines()), message  # one line per problem
    for word in words:
        assert word in message, (word, message)
    assert not (user_dir / "logs").exists(), "a refused launch created a run directory"


def digests(run_dir: Path) -> list[str]:
    return [json.loads((run_dir / "digests" / f"rank_{r}.json").read_text())["policy_sha256"] for r in (0, 1)]


@pytest.mark.slow
def test_a_task_module_trains_on_two_ranks(user_dir: Path) -> None:
    result = islab_train(
        user_dir, "--task-module", "my_tasks.reach", "--task", "My-Cartpole-v0", "--device", "cpu", "--nproc", "2",
        "--num-envs", "32", "--max-iterations", "2", "--log-dir", str(user_dir / "logs"), "--run-name", "mine",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_dir,) = (user_dir / "logs" / "rsl_rl" / "My-Cartpole-v0").glob("*_mine")
    first, second = digests(run_dir)
    assert first == second


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/external_task installed as a user would (a wheel, entry points and all) into a
    private target directory, so the test never changes the environment it runs in."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target",
         str(target), str(EXAMPLE)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return target


@pytest.mark.slow
def test_the_installed_example_is_listed_without_torch(installed_example: Path, tmp_path: Path) -> None:
    result = islab_train(tmp_path, "tasks", "--json", env={"PYTHONPATH": str(installed_example)}, importtime=True)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["task"]: row for row in json.loads(result.stdout)}
    assert rows["Acme-Pendulum-SwingUp-v0"]["package"] == "acme_tasks.pendulum"
    assert rows["Acme-Pendulum-SwingUp-v0"]["agent_configs"] == ["rl_games", "rsl_rl", "skrl"]
    assert (rows["Acme-Pendulum-SwingUp-v0"]["observation_size"], rows["Acme-Pendulum-SwingUp-v0"]["action_size"]) == (
        3,
        1,
    )
    assert imported_modules(result.stderr).isdisjoint({"torch", "numpy", "gymnasium", "acme_tasks"})


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "ml_framework"), PATHS)
def test_the_installed_example_trains_on_two_ranks(
    installed_example: Path, tmp_path: Path, lib: str, ml_framework: str
) -> None:
    result = islab_train(
        tmp_path, "--task", "Acme-Pendulum-SwingUp-v0", "--lib", lib, "--ml-framework", ml_framework,
        "--device", "cpu", "--nproc", "2", "--num-envs", "32", "--max-iterations", "2",
        "--log-dir", str(tmp_path / "logs"), "--run-name", "acme", env={"PYTHONPATH": str(installed_example)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / lib / "Acme-Pendulum-SwingUp-v0").glob("*_acme")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["iterations"] == 2
    first, second = digests(run_dir)
    assert first == second, "the two ranks ended with different policies"
