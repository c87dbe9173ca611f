"""islab.run.tensorboard_progress: progress records from the libraries' own TensorBoard event files.

Event files are written by real writers (torch's SummaryWriter, which rsl_rl and rl_games use;
skrl's own writer) with the tag names found in the installed libraries' sources, and, in the slow
test, by real trainings of rsl_rl, rl_games and skrl through our worker: the reader must give the
same mean returns the worker reported to progress.jsonl.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from islab.run.tensorboard_progress import (
    TAGS,
    CorruptEventFile,
    TensorBoardProgress,
    find_event_files,
)
from islab.rundir import read_progress
from islab.tasks import agent_config_path


def _library_source(relative: str) -> str:
    """Text of an installed library's source file (``rsl_rl/utils/logger.py``...)."""
    top = relative.split("/")[0]
    origin = Path(importlib.util.find_spec(top).origin).parent
    return (origin / relative.split("/", 1)[1]).read_text()


def test_tag_names_are_the_installed_libraries():
    """The table's tags are written, as string literals, by the installed libraries."""
    logger = _library_source("rsl_rl/utils/logger.py")
    for tag in (TAGS["rsl_rl"].reward_tag, TAGS["rsl_rl"].iteration_tag, TAGS["rsl_rl"].rate_tag):
        assert f'"{tag}"' in logger, tag
    a2c = _library_source("rl_games/common/a2c_common.py")
    assert "rewards_name + '/iter'" in a2c and TAGS["rl_games"].reward_tag == "rewards/iter"
    for tag in (TAGS["rl_games"].iteration_tag, TAGS["rl_games"].rate_tag):
        assert f"'{tag}'" in a2c, tag
    for path in ("skrl/agents/torch/base.py", "skrl/agents/jax/base.py"):
        assert f'"{TAGS["skrl"].reward_tag}"' in _library_source(path)
    for path in ("skrl/agents/torch/ppo/ppo.py", "skrl/agents/jax/ppo/ppo.py"):  # tracked at every update
        assert f'self.track_data("{TAGS["skrl"].iteration_tag}"' in _library_source(path)


def _torch_writer(log_dir: Path):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir), flush_secs=1)


def _write_rsl_rl(writer, first: int, last: int) -> None:
    # rsl_rl/utils/logger.py order, step = 0-based iteration
    for it in range(first, last):
        writer.add_scalar("Loss/learning_rate", 1e-3, it)
        writer.add_scalar("Perf/total_fps", 1000.0 + it, it)
        writer.add_scalar("Train/mean_reward", 10.0 * (it + 1), it)
    writer.flush()


def test_rsl_rl_records_and_incremental_reads(tmp_path):
    writer = _torch_writer(tmp_path / "logs" / "rsl_rl" / "cartpole" / "2026-01-01_00-00-00")
    _write_rsl_rl(writer, 0, 2)
    reader = TensorBoardProgress(tmp_path, "rsl_rl", max_iterations=5, rollouts=16, total_envs=8)
    first = reader.poll()
    assert [(r["iteration"], r["mean_return"], r["steps_per_s"], r["env_steps"]) for r in first] == [
        (1, 10.0, 1000.0, 128),
        (2, 20.0, 1001.0, 256),
    ]
    assert all(r["max_iterations"] == 5 and r["time_s"] >= 0 for r in first)
    assert reader.poll() == []  # nothing new
    _write_rsl_rl(writer, 2, 3)
    assert [(r["iteration"], r["mean_return"]) for r in reader.poll()] == [(3, 30.0)]  # only the new one
    writer.close()


def test_rl_games_records(tmp_path):
    writer = _torch_writer(tmp_path / "summaries")
    frames = 64  # per epoch; a2c_continuous logs the frame count at the START of the epoch
    for epoch in (1, 2, 3):
        start = (epoch - 1) * frames
        writer.add_scalar("performance/step_inference_rl_update_fps", 500.0 * epoch, start)
        writer.add_scalar("info/epochs", epoch, start)
        writer.add_scalar("rewards/step", -float(epoch), start)
        writer.add_scalar("rewards/iter", -float(epoch), epoch)
    writer.close()
    records = TensorBoardProgress(tmp_path, "rl_games").records()
    assert [(r["iteration"], r["mean_return"], r["steps_per_s"], r["env_steps"]) for r in records] == [
        (1, -1.0, 500.0, None),  # end of epoch 1 unknown without a hint
        (2, -2.0, 1000.0, 128),
        (3, -3.0, 1500.0, 192),
    ]
    assert TensorBoardProgress(tmp_path).records() == records  # library detected from its tags
    hinted = TensorBoardProgress(tmp_path, "rl_games", rollouts=16, total_envs=4).records()
    assert [r["env_steps"] for r in hinted] == [64, 128, 192]


def test_skrl_records_from_skrls_own_writer(tmp_path):
    from skrl.utils.tensorboard import SummaryWriter  # skrl writes with its own, not torch's

    writer = SummaryWriter(str(tmp_path))
    for timestep in (32, 64, 96):  # 1-based, multiples of write_interval
        writer.add_scalar(tag="Reward / Total reward (mean)", value=timestep / 32, timestep=timestep)
    writer.close()
    by_timestep = TensorBoardProgress(tmp_path, "skrl").records()
    assert [(r["iteration"], r["mean_return"]) for r in by_timestep] == [(32, 1.0), (64, 2.0), (96, 3.0)]
    assert TensorBoardProgress(tmp_path).records() == by_timestep  # library detected from its tags
    by_iteration = TensorBoardProgress(tmp_path, "skrl", rollouts=32, total_envs=4).records()
    assert [(r["iteration"], r["env_steps"]) for r in by_iteration] == [(1, 128), (2, 256), (3, 384)]


def test_skrl_iterations_show_before_any_episode_ended(tmp_path):
    """A short skrl run (a resumed one: its environments start afresh) may end before an episode
    does: no reward is written, but its PPO's tracked standard deviation is, at every write."""
    from skrl.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for timestep in (16, 32):
        writer.add_scalar(tag="Policy / Standard deviation", value=1.0, timestep=timestep)
    writer.close()
    records = TensorBoardProgress(tmp_path, "skrl", rollouts=16, total_envs=64).records()
    assert [(r["iteration"], r["env_steps"], r["mean_return"]) for r in records] == [(1, 1024, None), (2, 2048, None)]
    assert [r["iteration"] for r in TensorBoardProgress(tmp_path, "skrl").records()] == [16, 32]  # timesteps


def _complete_file(tmp_path: Path) -> bytes:
    writer = _torch_writer(tmp_path / "source")
    _write_rsl_rl(writer, 0, 3)
    writer.close()
    (path,) = find_event_files(tmp_path / "source")
    return path.read_bytes()


def test_torn_last_record_is_read_once_complete(tmp_path):
    data = _complete_file(tmp_path)
    target = tmp_path / "run" / "events.out.tfevents.1.host"
    target.parent.mkdir()
    for cut in (5, 14):  # inside the last record's data; inside its 12-byte header region
        target.write_bytes(data[:-cut])
        reader = TensorBoardProgress(tmp_path / "run", "rsl_rl")
        # iteration 3's marker and rate are complete, its reward (the last record) is torn
        assert [(r["iteration"], r["mean_return"]) for r in reader.poll()] == [(1, 10.0), (2, 20.0), (3, None)]
        with open(target, "ab") as handle:
            handle.write(data[-cut:])
        assert [(r["iteration"], r["mean_return"]) for r in reader.poll()] == [(3, 30.0)]


def test_corrupt_record_is_an_error(tmp_path):
    data = bytearray(_complete_file(tmp_path))
    data[-6] ^= 0xFF  # inside the last record's payload
    target = tmp_path / "run" / "events.out.tfevents.1.host"
    target.parent.mkdir()
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptEventFile):
        TensorBoardProgress(tmp_path / "run", "rsl_rl").poll()


def test_follows_the_newest_file_and_ignores_older_runs(tmp_path):
    old = _torch_writer(tmp_path / "logs" / "old")
    old.add_scalar("Train/mean_reward", -99.0, 0)
    old.close()
    os.utime(next((tmp_path / "logs" / "old").iterdir()), (time.time() - 100, time.time() - 100))
    launched = time.time() - 10
    assert TensorBoardProgress(tmp_path, "rsl_rl", not_before=launched).poll() == []
    new = _torch_writer(tmp_path / "logs" / "new")
    new.add_scalar("Train/mean_reward", 5.0, 0)
    new.close()
    records = TensorBoardProgress(tmp_path, "rsl_rl", not_before=launched).poll()
    assert [(r["iteration"], r["mean_return"]) for r in records] == [(1, 5.0)]
    everything = TensorBoardProgress(tmp_path, "rsl_rl")
    assert everything.poll()[0]["mean_return"] == 5.0  # newest file, not the old run's


def test_importing_the_reader_loads_no_heavy_framework():
    code = (
        "import sys, islab.run.tensorboard_progress as t, islab.resolve.isaaclab\n"
        "from tensorboard.compat.proto.event_pb2 import Event\n"
        "t.scalars_of(Event(wall_time=1.0).SerializeToString())\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'tensorflow', 'jax'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _tensorboards_own_reading(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of ``tag`` as TensorBoard itself reads the newest event file: the oracle."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(find_event_files(run_dir)[-1].parent))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["rsl_rl", "rl_games", "skrl"])
def test_real_training_events_match_the_workers_progress(lib, one_rank_run):
    """A real 2-iteration training (the session's shared 1-rank run) writes the library's own event
    file: the reader gives the values TensorBoard itself reads, at our iteration numbers; for rsl_rl
    and rl_games they are also the mean returns our worker reported in progress.jsonl (both average
    the same episodes; skrl's "Total reward" sums its own tracked rewards, while our skrl adapter
    reports the env's episode_return log, so only the iterations are compared there)."""
    run_dir = one_rank_run(lib)
    ours = {r["iteration"]: r["mean_return"] for r in read_progress(run_dir)}
    rollouts = None
    if lib == "skrl":  # skrl's x axis is timesteps: the agent config's rollouts make them iterations
        config = yaml.safe_load(agent_config_path("skrl", "Islab-Cartpole-v0").read_text())
        rollouts = config["agent"]["rollouts"]
    records = TensorBoardProgress(run_dir, lib, rollouts=rollouts).records()
    theirs = {r["iteration"]: r["mean_return"] for r in records if r["mean_return"] is not None}
    oracle = _tensorboards_own_reading(run_dir, TAGS[lib].reward_tag)
    # TensorBoard's steps in our iteration numbers: rsl_rl 0-based iterations, rl_games 1-based
    # epochs, skrl 1-based timesteps at the end of each rollout
    to_iteration = {"rsl_rl": lambda s: s + 1, "rl_games": lambda s: s, "skrl": lambda s: s // (rollouts or 1)}[lib]
    assert oracle and theirs == pytest.approx({to_iteration(step): value for step, value in oracle})
    assert set(theirs) <= set(ours) == {1, 2}
    if lib != "skrl":
        assert theirs == pytest.approx(ours, abs=1e-4)
