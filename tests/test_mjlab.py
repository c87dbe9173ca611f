"""mjlab's robot tasks in our worker (the ``[mjlab]`` extra): real mjlab on MuJoCo Warp, CPU ranks
over gloo, through the real launcher.

The first tests need no mjlab (they run in the main venv too): the tasks are registered like every
islab task (``islab/tasks/mjlab``, pyproject entry points), listed, and refused before launch with
one line naming the extra when mjlab is missing. The rest need mjlab and skip without it, except in
CI's mjlab job (``ISLAB_TEST_JOB=mjlab``, set by scripts/test.sh), where a missing mjlab must fail.
What must hold there:
* our registrations name mjlab ids, and their literal sizes are the real envs' (the launcher
  shows them without building an env);
* our shipped rsl_rl configs still equal mjlab's registered runner configs;
* the env bridge exposes the actor group as "policy", the critic group as "critic";
* every library path trains 2 ranks x 4 envs x 2 iterations of Mjlab-Cartpole-Balance and of Go1
  flat with one policy digest on both ranks (Go1's configs normalize observations, for every
  library: our normalizer sync is what keeps the digests equal), and each Go1 run resumed with
  ``--resume <run dir>`` continues at iteration 3 from the policy it saved.
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
from test_resume import PATHS  # the four library paths, skrl-JAX only where jax is installed

from islab.tasks import TASKS, agent_config_path

HAVE_MJLAB = importlib.util.find_spec("mjlab") is not None
needs_mjlab = pytest.mark.skipif(
    not HAVE_MJLAB and os.environ.get("ISLAB_TEST_JOB") != "mjlab",
    reason="mjlab is not installed (CI's mjlab job installs it: ISLAB_TEST_JOB=mjlab scripts/test.sh)",
)

CARTPOLE = "Mjlab-Cartpole-Balance"
GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
G1 = "Mjlab-Velocity-Flat-Unitree-G1"
MJLAB_TASKS = [CARTPOLE, GO1, G1]
ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]


def test_mjlab_tasks_are_registered_listed_and_refused_without_mjlab(islab, monkeypatch) -> None:
    for task_id in MJLAB_TASKS:
        info = TASKS[task_id]
        assert (info.package, info.extra) == ("islab.tasks.mjlab", "mjlab")
        assert info.env_entry_point == "islab.tasks.mjlab.mjlab_env:MjlabEnv" and info.default_num_envs == 64
        for lib in ("rl_games", "rsl_rl", "skrl"):
            assert agent_config_path(lib, task_id).is_file()
    assert (TASKS[GO1].observation_size, TASKS[GO1].action_size) == (48, 12)
    monkeypatch.setitem(sys.modules, "mjlab", None)  # find_spec("mjlab") -> None: not installed
    code, out, _ = islab("tasks", "--json")
    rows = {row["task"]: row for row in json.loads(out)}
    assert code == 0 and rows[GO1]["agent_configs"] == ["rl_games", "rsl_rl", "skrl"]
    assert (rows[GO1]["extra"], rows[GO1]["extra_missing"]) == ("mjlab", True)
    assert rows["Islab-Cartpole-v0"]["extra_missing"] is False
    code, out, _ = islab("tasks")
    assert code == 0 and "needs [mjlab]" in out and "'islab-train[mjlab]'" in out
    code, out, err = islab("--task", GO1, "--lib", "rsl_rl", "--device", "cpu", "--dry-run")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: task (--task): {GO1} needs the [mjlab] extra") and "'islab-train[mjlab]'" in err


@needs_mjlab
def test_registrations_name_mjlab_tasks() -> None:
    """Each registration's config names the mjlab task of the same id (the bridge builds that)."""
    import mjlab.tasks  # noqa: F401
    from mjlab.tasks.registry import list_tasks

    from islab.envs import load_entry_point

    for task_id in MJLAB_TASKS:
        cfg = load_entry_point(TASKS[task_id].cfg_entry_point)()
        assert cfg.mjlab_task == task_id and task_id in list_tasks()


@needs_mjlab
def test_shipped_rsl_rl_configs_are_mjlabs_own() -> None:
    from islab.tasks.mjlab.export_rsl_rl import rsl_rl_train_cfg

    for task_id in MJLAB_TASKS:
        shipped = yaml.safe_load(agent_config_path("rsl_rl", task_id).read_text())
        regenerate = f"regenerate it: python -m islab.tasks.mjlab.export_rsl_rl {task_id}"
        assert shipped == rsl_rl_train_cfg(task_id), regenerate


@needs_mjlab
@pytest.mark.parametrize("task_id", MJLAB_TASKS)
def test_env_bridge_groups_spaces_and_episode_log(task_id: str) -> None:
    """The literal sizes the launcher shows are the real envs'; the groups are renamed; episode
    statistics are reported the way our own envs report them."""
    import torch

    from islab.envs import make_env
    from islab.envs.base import EPISODES_ENDED
    from islab.host_syncs import HostSyncCounter

    env = make_env(task_id, 2, "cpu", seed=3)
    info = TASKS[task_id]
    spaces = env.single_observation_space
    assert spaces["policy"].shape == (info.observation_size,)
    assert env.single_action_space.shape == (info.action_size,)
    obs, _ = env.reset()
    assert set(obs) == set(spaces) and obs["policy"].shape == (2, info.observation_size)
    if task_id == GO1:
        assert spaces["critic"].shape == (72,) and env.max_episode_length == 1000
    env.episode_length_buf[:] = env.max_episode_length - 1  # both episodes time out on the next step
    _, reward, terminated, truncated, extras = env.step(torch.zeros(2, info.action_size))
    assert bool((terminated | truncated).all()) and int(env.episode_length_buf.max()) == 0
    assert float(extras["log"]["episode_return"]) == pytest.approx(float(reward.mean()))
    assert float(extras["log"]["episode_length"]) == env.max_episode_length
    assert int(extras[EPISODES_ENDED]) == 2
    # our part of the step never waits for the device (mjlab's own reset finds its envs itself)
    counter = HostSyncCounter()
    with counter.python_level_host_reads(), counter:
        env.episode_length_buf[:1] = env.max_episode_length - 1
        env.step(torch.zeros(2, info.action_size))
    assert [event for event in counter.events if event.origin == "islab"] == []
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


@needs_mjlab
@pytest.mark.slow
@pytest.mark.parametrize(
    ("lib", "framework", "task"),
    [pytest.param(*path.values, task, id=f"{name}-{path.id}", marks=path.marks)
     for name, task in (("cartpole", CARTPOLE), ("go1", GO1)) for path in PATHS],
)  # fmt: skip
def test_two_cpu_ranks_train_an_mjlab_task(tmp_path: Path, lib: str, framework: str, task: str) -> None:
    done = launch(tmp_path, lib, framework, task)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / lib / task).glob("*_mj")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iteration"] == 2 and summary["world_size"] == 2
    first, second = digests(run_dir)
    assert first == second, "the two ranks hold different policies"
    if task != GO1:
        return
    # Resume the run directory: it continues at iteration 3 with the saved policy and normalizers.
    again = launch(tmp_path, lib, framework, task, "--resume", str(run_dir))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["start_iteration"], summary["iteration"]) == (2, 4)
    assert summary["resumed"]["policy_sha256_loaded"] == first
    resumed_first, resumed_second = digests(run_dir)
    assert resumed_first == resumed_second != first
