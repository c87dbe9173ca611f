"""mjlab's tasks in our worker (the ``[mjlab]`` extra): real mjlab on MuJoCo Warp, CPU ranks over
gloo, through the real launcher.

The first test needs no mjlab (it runs in the main venv too): every mjlab task is announced in
pyproject's entry points, listed, and refused before launch with one line naming the extra when
mjlab is missing. The rest need mjlab and skip without it, except in CI's mjlab job
(``ISLAB_TEST_JOB=mjlab``, set by scripts/test.sh), where a missing mjlab must fail. What must hold:
* the announced ids are exactly mjlab's registry (``mjlab.tasks.registry.list_tasks``), and
  ``islab-train tasks`` lists every one, trainable or with the reason it is not;
* each task's rsl_rl config is mjlab's registered runner config; rl_games' and skrl's carry its
  network sizes, learning rate, gamma, lambda, clip, epochs and minibatches;
* the env bridge exposes the actor group as "policy", the critic group as "critic";
* every trainable mjlab task trains one iteration with rsl_rl (on one CPU rank; Cartpole-Balance
  and Go1 flat on two, below), and Warp's missing-CUDA-driver warning stays off the console of such
  CPU runs (it goes to the rank log);
* every library path trains 2 ranks x 4 envs x 2 iterations of Mjlab-Cartpole-Balance and of Go1
  flat with one policy digest on both ranks (Go1's configs normalize observations, for every
  library: our normalizer sync is what keeps the digests equal), and each Go1 run resumed with
  ``--resume <run dir>`` continues at iteration 3 from the policy it saved.
* ``play --video`` of an mjlab run renders through MuJoCo's offscreen renderer (an MP4 decoded back).
The runs collect 4 env steps per env and iteration (the libraries' rollout-length override) instead of
the configs' 24: a whole iteration (rollout, update, checkpoint) either way, and stepping MuJoCo Warp
on CPU is most of these tests' time.
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
from child_env import child_env
from training_runs import PATHS

from islab.libs.registry import LIBRARIES
from islab.tasks import TASKS, agent_config_path

HAVE_MJLAB = importlib.util.find_spec("mjlab") is not None
needs_mjlab = pytest.mark.skipif(
    not HAVE_MJLAB and os.environ.get("ISLAB_TEST_JOB") != "mjlab",
    reason="mjlab is not installed (CI's mjlab job installs it: ISLAB_TEST_JOB=mjlab scripts/test.sh)",
)

CARTPOLE = "Mjlab-Cartpole-Balance"
GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
G1 = "Mjlab-Velocity-Flat-Unitree-G1"
ANNOUNCED = sorted(task for task, entry in TASKS.entries.items() if entry.package == "islab.tasks.mjlab")
# What mjlab 1.6 registers that islab cannot train, and why (the bridge's islab_unavailable).
IMAGES = ("Mjlab-Lift-Cube-Yam-Depth", "Mjlab-Lift-Cube-Yam-Rgb", "Mjlab-Multi-Cube-Seg-Yam")
MOTIONS = ("Mjlab-Tracking-Flat-Unitree-G1", "Mjlab-Tracking-Flat-Unitree-G1-No-State-Estimation")
TRAINABLE = [task for task in ANNOUNCED if task not in IMAGES + MOTIONS]
ROLLOUT = 4  # env steps per env and iteration in these tests' runs (the configs say 24)
TWO_RANK_TASKS = {CARTPOLE: "cartpole", GO1: "go1"}  # trained by every library path at 2 ranks
ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]
# What Warp's native init prints without a CUDA driver (warp/native/cuda_util.cpp)
WARP_NO_DRIVER = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver"


def test_mjlab_tasks_are_announced_listed_and_refused_without_mjlab(islab, monkeypatch) -> None:
    assert len(ANNOUNCED) == 12 and {CARTPOLE, GO1, G1} <= set(ANNOUNCED)
    for task_id in ANNOUNCED:
        assert TASKS.entry(task_id).extra == "mjlab"
    monkeypatch.setitem(sys.modules, "mjlab", None)  # find_spec("mjlab") -> None: not installed
    code, out, _ = islab("tasks", "--json")
    rows = {row["task"]: row for row in json.loads(out)}
    assert code == 0 and set(ANNOUNCED) <= set(rows)
    assert (rows[GO1]["extra"], rows[GO1]["extra_missing"]) == ("mjlab", True)
    assert rows["Islab-Cartpole-v0"]["extra_missing"] is False
    code, out, _ = islab("tasks")
    assert code == 0 and "needs [mjlab]" in out and '-e ".[mjlab]"' in out
    code, out, err = islab("--task", GO1, "--lib", "rsl_rl", "--device", "cpu", "--dry-run")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: task (--task): {GO1} needs the [mjlab] extra") and '-e ".[mjlab]"' in err


@needs_mjlab
def test_every_task_mjlab_registers_is_announced_and_listed() -> None:
    import mjlab.tasks  # noqa: F401
    from mjlab.tasks.registry import list_tasks

    assert sorted(list_tasks()) == ANNOUNCED, "pyproject's islab.tasks entry points must list every mjlab task"
    listed = subprocess.run([*ISLAB_TRAIN, "tasks", "--json"], capture_output=True, text=True, timeout=900)
    assert listed.returncode == 0, listed.stderr[-3000:]
    rows = {row["task"]: row for row in json.loads(listed.stdout)}
    for task_id in list_tasks():
        row = rows[task_id]
        assert row["error"] is None and row["extra_missing"] is False, row
        if task_id in IMAGES + MOTIONS:
            assert ("camera" if task_id in IMAGES else "motion file") in row["unavailable"], row
        else:
            assert row["unavailable"] is None and row["agent_configs"] == ["rl_games", "rsl_rl", "skrl"], row
            assert row["default_num_envs"] == 64


@needs_mjlab
def test_an_unavailable_task_is_refused_with_its_reason(islab) -> None:
    code, out, err = islab("--task", MOTIONS[0], "--device", "cpu", "--dry-run")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{MOTIONS[0]} cannot be trained by islab" in err and "motion file" in err


@needs_mjlab
def test_agent_configs_are_mjlabs_runner_config_and_derived_from_it() -> None:
    from islab.tasks.mjlab.agent_configs import rsl_rl

    for task_id in TRAINABLE:
        shipped = {
            lib: yaml.safe_load(agent_config_path(lib, task_id).read_text()) for lib in ("rl_games", "rsl_rl", "skrl")
        }
        mjlab_cfg = rsl_rl(task_id)
        assert shipped["rsl_rl"] == mjlab_cfg
        algorithm, actor = mjlab_cfg["algorithm"], mjlab_cfg["actor"]
        games = shipped["rl_games"]["params"]
        assert games["network"]["mlp"]["units"] == actor["hidden_dims"]
        config = games["config"]
        assert (config["learning_rate"], config["gamma"], config["tau"], config["e_clip"], config["mini_epochs"]) == (
            algorithm["learning_rate"], algorithm["gamma"], algorithm["lam"], algorithm["clip_param"],
            algorithm["num_learning_epochs"],
        )  # fmt: skip
        assert config["minibatch_size"] * algorithm["num_mini_batches"] == 64 * mjlab_cfg["num_steps_per_env"]
        skrl = shipped["skrl"]
        assert skrl["models"]["policy"]["network"][0]["layers"] == actor["hidden_dims"]
        assert skrl["models"]["value"]["network"][0]["layers"] == mjlab_cfg["critic"]["hidden_dims"]
        agent = skrl["agent"]
        assert (agent["learning_rate"], agent["discount_factor"], agent["gae_lambda"], agent["ratio_clip"]) == (
            algorithm["learning_rate"], algorithm["gamma"], algorithm["lam"], algorithm["clip_param"],
        )  # fmt: skip
        assert (agent["learning_epochs"], agent["mini_batches"], agent["rollouts"]) == (
            algorithm["num_learning_epochs"], algorithm["num_mini_batches"], mjlab_cfg["num_steps_per_env"],
        )  # fmt: skip


@needs_mjlab
@pytest.mark.parametrize(("task_id", "sizes"), [(CARTPOLE, (5, 5, 1)), (GO1, (48, 72, 12)), (G1, (99, 111, 29))])
def test_env_bridge_groups_spaces_and_episode_log(task_id: str, sizes: tuple[int, int, int]) -> None:
    """The groups are renamed; episode statistics are reported the way our own envs report them."""
    import torch

    from islab.envs import make_env
    from islab.envs.base import EPISODES_ENDED
    from islab.worker.host_syncs import HostSyncCounter

    env = make_env(task_id, 2, "cpu", seed=3)
    spaces = env.single_observation_space
    assert (spaces["policy"].shape, spaces["critic"].shape) == ((sizes[0],), (sizes[1],))
    assert env.single_action_space.shape == (sizes[2],)
    obs, _ = env.reset()
    assert set(obs) == set(spaces) and obs["policy"].shape == (2, sizes[0])
    if task_id == GO1:
        assert env.max_episode_length == 1000
    env.episode_length_buf[:] = env.max_episode_length - 1  # both episodes time out on the next step
    _, reward, terminated, truncated, extras = env.step(torch.zeros(2, sizes[2]))
    assert bool((terminated | truncated).all()) and int(env.episode_length_buf.max()) == 0
    assert float(extras["log"]["episode_return"]) == pytest.approx(float(reward.mean()))
    assert float(extras["log"]["episode_length"]) == env.max_episode_length
    assert int(extras[EPISODES_ENDED]) == 2
    # our part of the step never waits for the device (mjlab's own reset finds its envs itself)
    counter = HostSyncCounter()
    with counter.python_level_host_reads(), counter:
        env.episode_length_buf[:1] = env.max_episode_length - 1
        env.step(torch.zeros(2, sizes[2]))
    assert [event for event in counter.events if event.origin == "islab"] == []
    env.close()


@needs_mjlab
def test_warps_missing_driver_warning_leaves_stderr_on_cpu_ranks_only() -> None:
    """Issue 23 item 16: on a CPU rank Warp's "Could not find or load the NVIDIA CUDA driver" goes to
    stdout (the rank log, off the console); a GPU rank's stays on stderr, where it means trouble."""

    def init(device: str) -> subprocess.CompletedProcess:
        code = f"from islab.tasks.mjlab.mjlab_env import init_warp; init_warp({device!r})"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    gpu = init("cuda:0")
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    if WARP_NO_DRIVER not in gpu.stderr:
        pytest.skip("Warp finds a CUDA driver on this machine: it has no warning to move")
    cpu = init("cpu")
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert WARP_NO_DRIVER not in cpu.stderr, cpu.stderr
    assert WARP_NO_DRIVER in cpu.stdout, cpu.stdout  # moved, not dropped: the worker tees stdout to the rank log


def launch(
    tmp_path: Path, lib: str, framework: str, task: str, *extra: str, ranks: int = 2, envs: int = 4, iterations: int = 2
) -> subprocess.CompletedProcess:
    rollout = f"{'.'.join(LIBRARIES[lib].rollout_key)}={ROLLOUT}"
    command = [
        *ISLAB_TRAIN, "--lib", lib, "--ml-framework", framework, "--device", "cpu", "--nproc", str(ranks),
        "--task", task, "--num-envs", str(envs), "--max-iterations", str(iterations),
        "--log-dir", str(tmp_path / "logs"), "--run-name", "mj", *extra, rollout,
    ]  # fmt: skip
    env = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    env.setdefault("WARP_CACHE_PATH", str(Path(os.environ.get("TMPDIR", "/tmp")) / "islab-warp-cache"))
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def digests(run_dir: Path) -> list[str]:
    return [json.loads((run_dir / "digests" / f"rank_{r}.json").read_text())["policy_sha256"] for r in (0, 1)]


@needs_mjlab
@pytest.mark.slow
@pytest.mark.parametrize("task", [task for task in TRAINABLE if task not in TWO_RANK_TASKS])
def test_every_trainable_mjlab_task_trains_one_iteration_with_rsl_rl(tmp_path: Path, task: str) -> None:
    """The tasks the two-rank test below trains with rsl_rl are not trained again here."""
    done = launch(tmp_path, "rsl_rl", "torch", task, ranks=1, envs=2, iterations=1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "rsl_rl" / task).glob("*_mj")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["iteration"], summary["world_size"]) == (1, 1)
    assert WARP_NO_DRIVER not in done.stderr, done.stderr  # a CPU run: not on the console (issue 23 item 16)


@needs_mjlab
@pytest.mark.slow
@pytest.mark.parametrize(
    ("lib", "framework", "task"),
    [pytest.param(*path.values, task, id=f"{name}-{path.id}", marks=path.marks)
     for task, name in TWO_RANK_TASKS.items() for path in PATHS],
)  # fmt: skip
def test_two_cpu_ranks_train_an_mjlab_task(tmp_path: Path, lib: str, framework: str, task: str) -> None:
    done = launch(tmp_path, lib, framework, task)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert WARP_NO_DRIVER not in done.stderr, done.stderr  # a CPU run: not on the console (issue 23 item 16)
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


@needs_mjlab
@pytest.mark.slow
def test_play_video_of_an_mjlab_task_through_mujocos_renderer(tmp_path: Path) -> None:
    """``play --video`` of an mjlab run: MuJoCo's offscreen renderer (MUJOCO_GL=osmesa on this CPU
    machine, egl where only Mesa's libEGL is there), decoded back: 20 frames of 320 x 240 that change."""
    from videos import decode_mp4, distinct_frames

    done = launch(tmp_path, "rsl_rl", "torch", CARTPOLE, ranks=1, envs=2, iterations=1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "rsl_rl" / CARTPOLE).glob("*_mj")
    play = [*ISLAB_TRAIN, "play", str(run_dir), "--episodes", "1", "--num-envs", "1", "--video", "--video-length", "20"]
    played = subprocess.run(play, capture_output=True, text=True, timeout=600, env=child_env(("ISLAB_", "RANK")))
    assert played.returncode == 0, played.stdout[-3000:] + played.stderr[-3000:]
    (video,) = (run_dir / "videos" / "play").glob("*.mp4")
    frames, meta = decode_mp4(video)
    assert len(frames) == json.loads(video.with_suffix(".json").read_text())["frames"] == 20
    assert tuple(meta["size"]) == (320, 240)
    assert distinct_frames(frames) >= 10, "the picture hardly changes"
