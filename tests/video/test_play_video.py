"""``islab-train play RUN --video``: an MP4 of the evaluation's own episodes, decoded back.

On conftest's shared 1-rank rsl_rl Cartpole run, README's video command (``--video --envs 2
--episodes 2``) writes ``RUN/videos/play/``: an H.264 MP4 at Cartpole's 60 frames/s of 640 x 240
(two 320 x 240 envs side by side), one frame for the reset and one per policy step until both
episodes ended (1 + the longer episode), frames that change, and a JSON beside it with each
recorded episode's return. Those are the episodes ``play.json`` counts: with two episodes on two
envs, the video's returns are the evaluation's. (Quadcopter's video: tests/video/test_training_video.py,
on its 2-rank run.) Bad video options are refused with exit 2 before anything runs.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env
from paths import REPO
from videos import decode_mp4, distinct_frames

from islab import rundir

pytestmark = pytest.mark.needs("imageio_ffmpeg")


def islab_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "islab.cli", *args], capture_output=True, text=True, timeout=600,
                          env=child_env(("ISLAB_", "RANK", "WORLD_SIZE")), check=False)  # fmt: skip


def readme_video_command(run_dir: Path) -> list[str]:
    """README's ``play logs/rsl_rl/... --video`` line, its ``<run>`` replaced by ``run_dir``."""
    (line,) = [line.strip() for line in (REPO / "README.md").read_text().splitlines()
               if line.strip().startswith("islab-train play logs/rsl_rl/") and "--video" in line]  # fmt: skip
    command = line.partition(" #")[0]
    return [str(run_dir) if re.fullmatch(r"\S*<run>\S*", arg) else arg for arg in shlex.split(command)[1:]]


def videos(run_dir: Path) -> list[Path]:
    return sorted(rundir.videos_dir(run_dir, "play").glob("*.mp4"))


@pytest.mark.slow
def test_readme_video_command_records_the_evaluated_cartpole_episodes(one_rank_run) -> None:
    run_dir = one_rank_run("rsl_rl")
    for old in videos(run_dir):  # the shared run may hold another test's video
        old.unlink()
    done = islab_train(*readme_video_command(run_dir), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    (video,) = videos(run_dir)
    record = json.loads(video.with_suffix(".json").read_text())
    assert result["video"] == record and record["video"] == str(video)
    frames, meta = decode_mp4(video)
    assert meta["codec"] == "h264" and meta["fps"] == pytest.approx(60.0)  # Cartpole's policy rate
    assert (record["width"], record["height"]) == (640, 240) == tuple(meta["size"])  # 2 envs, side by side
    lengths = [episode["length"] for episode in record["episodes"]]
    assert all(episode["ended"] for episode in record["episodes"])
    assert len(frames) == record["frames"] == 1 + max(lengths)  # the reset, then one frame per step
    assert distinct_frames(frames) >= len(frames) // 2, "the picture hardly changes"
    # the evaluation's two episodes are the two on screen
    assert [episode["env"] for episode in record["episodes"]] == [0, 1] and result["episodes"] == 2
    returns = sorted(episode["return"] for episode in record["episodes"])
    assert returns == pytest.approx([result["return"]["min"], result["return"]["max"]], abs=1e-4)
    assert f"return_{record['mean_return']:.1f}" in video.name


@pytest.mark.parametrize(
    ("args", "field"),
    [(("--envs", "2"), "--envs"), (("--video-length", "10"), "--video-length"),
     (("--video", "--envs", "0"), "--envs"), (("--video", "--envs", "5", "--num-envs", "4"), "--envs"),
     (("--video", "--envs", "3", "--episodes", "2"), "--envs")],
)  # fmt: skip
def test_bad_video_options_exit_2(tmp_path: Path, args: tuple[str, ...], field: str) -> None:
    """Refused before the run directory is even read."""
    done = islab_train("play", str(tmp_path), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {field}"), done.stderr
