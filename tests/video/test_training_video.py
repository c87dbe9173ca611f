"""``--video-interval N`` in a real 2-rank CPU run, then ``play --video`` of it: Quadcopter, decoded back.

Rank 0 builds its env with ``render_mode="rgb_array"`` and records env 0's next whole episode at
the start and after every N-th iteration; rank 1's env has no renderer (its log says
``render_mode=None``). Each recorded episode is ``videos/train/iter_<N>.mp4`` with its JSON (rank
0, return, length), a playable H.264 file of one frame per step of the episode (its reset state,
then after each step but the last, which resets the env), 320 x 240, that change, and a clip of the
same iteration in TensorBoard's events under ``videos/train/`` (tag ``video/train``). The same run
then played with ``--video --video-length 40``: 40 frames (or the episode, if shorter) at
Quadcopter's 50 frames/s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env
from training_runs import launch
from videos import decode_mp4, distinct_frames

from islab import rundir

INTERVAL, ITERATIONS = 6, 12
pytestmark = [pytest.mark.slow, pytest.mark.needs("imageio_ffmpeg")]


def clip_steps(folder: Path) -> list[int]:
    """The steps of the ``video/train`` clips in the TensorBoard events under ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={IMAGES: 0})
    events.Reload()
    return [image.step for image in events.Images("video/train")]


@pytest.fixture(scope="module")
def quadcopter_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    tmp_path = tmp_path_factory.mktemp("video-interval")
    done = launch(tmp_path, "rsl_rl", "torch", "--task", "Islab-Quadcopter-v0", "--video-interval", str(INTERVAL),
                  iterations=("--max-iterations", str(ITERATIONS)))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs").glob("*/*/*")
    return run_dir, done


def test_video_interval_records_on_rank_0_only(quadcopter_run) -> None:
    run_dir, done = quadcopter_run
    assert "render_mode=rgb_array" in rundir.rank_log(run_dir, 0).read_text()
    assert "render_mode=None" in rundir.rank_log(run_dir, 1).read_text()  # no renderer on rank 1
    folder = rundir.videos_dir(run_dir, "train")
    mp4s = sorted(folder.glob("iter_*.mp4"), key=lambda path: int(path.stem.split("_")[1]))
    assert mp4s and mp4s[0].name == "iter_0.mp4", sorted(folder.iterdir())  # the start is recorded
    wanted = []
    for video in mp4s:
        record = json.loads(video.with_suffix(".json").read_text())
        assert record["rank"] == 0 and record["iteration"] % INTERVAL == 0
        frames, meta = decode_mp4(video)
        # the reset state, then one frame after each step but the last
        assert len(frames) == record["frames"] == record["length"]
        assert tuple(meta["size"]) == (320, 240) and meta["codec"] == "h264"
        assert distinct_frames(frames) >= len(frames) // 2
        wanted.append(record["iteration"])
    assert clip_steps(folder) == wanted
    assert "rank 1 recorded" not in done.stdout + done.stderr


def test_play_video_of_quadcopter(quadcopter_run) -> None:
    run_dir, _ = quadcopter_run
    play = [sys.executable, "-m", "islab.cli", "play", str(run_dir), "--episodes", "1", "--video",
            "--video-length", "40"]  # fmt: skip
    done = subprocess.run(play, capture_output=True, text=True, timeout=600, env=child_env(("ISLAB_", "RANK")))
    assert done.returncode == 0, done.stderr[-3000:]
    (video,) = rundir.videos_dir(run_dir, "play").glob("*.mp4")
    record = json.loads(video.with_suffix(".json").read_text())
    frames, meta = decode_mp4(video)
    (episode,) = record["episodes"]
    assert len(frames) == record["frames"] == min(40, episode["length"] + 1)
    assert tuple(meta["size"]) == (320, 240) and meta["fps"] == pytest.approx(50.0)
    assert distinct_frames(frames) >= len(frames) // 2, "the drone does not move on screen"
    assert f"video: {video}" in done.stdout
