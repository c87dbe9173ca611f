"""mjlab's robot tasks in our worker (the ``[mjlab]`` extra): real mjlab on MuJoCo Warp, CPU ranks
over gloo, through the real launcher.

Skipped without mjlab (the main CI venv has rsl-rl-lib 5.5 and no mjlab; the mjlab job installs
the extra, which brings rsl-rl-lib 5.4.2: see docs/MJLAB.md). What must hold:
* the torch-free lookup finds exactly the ids mjlab registers, and the launcher lists them;
* our shipped rsl_rl configs still equal mjlab's registered runner configs;
* the env bridge exposes the actor group as "policy", the critic group as "critic", gymnasium
  spaces of the sizes the launcher shows;
* for every library path, 2 ranks x 4 envs x 2 iterations on Mjlab-Cartpole-Balance and on Go1
  flat velocity finish through ``python -m islab.cli`` with one policy digest on both ranks (Go1's
  rsl_rl config normalizes observations: the normalizer sync is what keeps the digests equal);
* a run resumed with ``--resume <run dir>`` continues at iteration 3.
Set WARP_CACHE_PATH to keep Warp's compiled kernels between runs (Go1: ~25 s the first time).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mjlab") is None, reason="mjlab is not installed")

CARTPOLE = "Mjlab-Cartpole-Balance"
GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]

PATHS = [
    pytest.param("rsl_rl", "torch", id="rsl_rl"),
    pytest.param("rl_games", "torch", id="rl_games"),
    pytest.param("skrl", "torch", id="skrl-torch"),
    pytest.param(
        "skrl", "jax", id="skrl-jax",
        marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
    ),
]  # fmt: skip


def test_static_lookup_finds_what_mjlab_registers() -> None:
    code = (
        "import sys, json; from islab.mjlab_tasks import mjlab_task_ids; ids = mjlab_task_ids(); "
        "assert 'torch' not in sys.modules and 'mjlab' not in sys.modules; "
        "import mjlab.tasks; from mjlab.tasks.registry import list_tasks; print(json.dumps([ids, list_tasks()]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    static, registered = json.loads(done.stdout.strip().splitlines()[-1])
    assert static == sorted(registered) and CARTPOLE in static and GO1 in static


def test_shipped_rsl_rl_configs_are_mjlabs_own() -> None:
    from islab.mjlab_tasks import AGENT_FOLDERS, agent_config_path
    from islab.mjlab_tasks.export_rsl_rl import rsl_rl_train_cfg

    for task_id in AGENT_FOLDERS:
        shipped = yaml.safe_load(agent_config_path("rsl_rl", task_id).read_text())
        regenerate = f"regenerate it: python -m islab.mjlab_tasks.export_rsl_rl {task_id}"
        assert shipped == rsl_rl_train_cfg(task_id), regenerate


def test_env_bridge_groups_spaces_and_episode_log() -> None:
    import torch

    from islab.envs import make_env
    from islab.mjlab_tasks import KNOWN_SIZES

    env = make_env(GO1, 2, "cpu", seed=3)
    spaces = env.single_observation_space
    assert spaces["policy"].shape == (KNOWN_SIZES[GO1][0],) and spaces["critic"].shape == (72,)
    assert env.single_action_space.shape == (KNOWN_SIZES[GO1][1],) and env.max_episode_length == 1000
    obs, _ = env.reset()
    assert set(obs) == {"policy", "critic"} and obs["critic"].shape == (2, 72)
    env.episode_length_buf[:] = env.max_episode_length - 1  # both episodes time out on the next step
    _, reward, terminated, truncated, extras = env.step(torch.zeros(2, 12))
    assert bool((terminated | truncated).all()) and int(env.episode_length_buf.max()) == 0
    assert float(extras["log"]["episode_return"]) == pytest.approx(float(reward.mean()))
    assert float(extras["log"]["episode_length"]) == env.max_episode_length
    env.close()


def launch(tmp_path: Path, lib: str, framework: str, task: str, *extra: str) -> subprocess.CompletedProcess:
    command = [
        *ISLAB_TRAIN, "--lib", lib, "--ml-framework", framework, "--device", "cpu", "--nproc", "2",
        "--task", task, "--num-envs", "4", "--max-iterations", "2", "--log-dir", str(tmp_path / "logs"),
        "--run-name", "mj", *extra,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ISLAB_", "RANK", "WORLD_SIZE"))}
    env.setdefault("WARP_CACHE_PATH", str(Path(os.environ.get("TMPDIR", "/tmp")) / "islab-warp-cache"))
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def digests(run_dir: Path) -> list[str]:
    return [json.loads((run_dir / "digests" / f"rank_{r}.json").read_text())["policy_sha256"] for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "framework"), PATHS)
@pytest.mark.parametrize("task", [CARTPOLE, GO1], ids=["cartpole", "go1"])
def test_two_cpu_ranks_train_an_mjlab_task(tmp_path: Path, lib: str, framework: str, task: str) -> None:
    done = launch(tmp_path, lib, framework, task)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / lib / task).glob("*_mj")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iteration"] == 2 and summary["world_size"] == 2
    first, second = digests(run_dir)
    assert first == second, "the two ranks hold different policies"
    if not (lib == "rsl_rl" and task == CARTPOLE):
        return
    # Resume the run directory: it continues at iteration 3 with the saved policy.
    again = launch(tmp_path, lib, framework, task, "--resume", str(run_dir))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["start_iteration"], summary["iteration"]) == (2, 4)
    assert summary["resumed"]["policy_sha256_loaded"] == first
    resumed_first, resumed_second = digests(run_dir)
    assert resumed_first == resumed_second != first


def test_tasks_command_lists_mjlab_tasks(islab) -> None:
    code, out, _ = islab("tasks", "--json")
    assert code == 0
    rows = {row["task"]: row for row in json.loads(out)}
    assert rows[GO1]["agent_configs"] == ["rl_games", "rsl_rl", "skrl"]
    assert (rows[GO1]["observation_size"], rows[GO1]["action_size"]) == (48, 12)
    assert "Mjlab-Velocity-Rough-Unitree-Go1" in rows  # listed; no agent configs yet
