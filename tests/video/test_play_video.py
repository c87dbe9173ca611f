"""``islab-train play RUN --video``: an MP4 of the evaluation's own episodes, decoded back.

On real runs trained through the launcher (Cartpole: conftest's shared 1-rank rsl_rl run;
Quadcopter: a 1-iteration run of its own), README's video command writes ``RUN/videos/play/``:
an H.264 MP4 whose frames are 320 x 240 per env (``--envs 2``: two tiles side by side), one per
policy step plus the reset (so 1 + the longest recorded episode, or ``--video-length``), that
change from frame to frame, and a JSON beside it with each recorded episode's return. Those are the
episodes ``eval.json`` counts: played with ``--episodes 2 --num-envs 2 --envs 2``, the video's two
returns are the evaluation's. Bad video options are refused with exit 2 before anything runs.
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
    """README's ``play ... --video`` line, its run directory placeholder replaced by ``run_dir``."""
    (line,) = [line.strip() for line in (REPO / "README.md").read_text().splitlines()
               if line.strip().startswith("islab-train play") and "--video" in line]  # fmt: skip
    command = line.partition(" #")[0]
    return [str(run_dir) if re.fullmatch(r"\S*<run>\S*", arg) else arg for arg in shlex.split(command)[1:]]


def videos(run_dir: Path) -> list[Path]:
    return sorted(rundir.videos_dir(run_dir, "play").glob("*.mp4"))


@pytest.mark.slow
def test_readme_video_command_records_cartpole(one_rank_run) -> None:
    run_dir = one_rank_run("rsl_rl")
    for old in videos(run_dir):  # the shared run may hold another test's video
        old.unlink()
    done = islab_train(*readme_video_command(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    (video,) = videos(run_dir)
    record = json.loads(video.with_suffix(".json").read_text())
    frames, meta = decode_mp4(video)
    assert meta["codec"] == "h264" and meta["fps"] == pytest.approx(60.0)  # Cartpole's policy rate
    assert (record["width"], record["height"]) == (640, 240) == tuple(meta["size"])  # 2 envs, side by side
    lengths = [episode["length"] for episode in record["episodes"]]
    assert all(episode["ended"] for episode in record["episodes"])
    assert len(frames) == record["frames"] == 1 + max(lengths)  # the reset, then one frame per step
    assert distinct_frames(frames) >= len(frames) // 2, "the picture hardly changes"
    evaluated = json.loads((run_dir / rundir.EVAL_FILE).read_text())
    assert evaluated["video"]["video"] == str(video)
    for episode in record["episodes"]:  # episodes of the evaluation
        assert evaluated["return"]["min"] - 1e-4 <= episode["return"] <= evaluated["return"]["max"] + 1e-4
    assert f"return_{record['mean_return']:.1f}" in video.name


@pytest.mark.slow
def test_the_video_shows_the_episodes_play_evaluates(one_rank_run) -> None:
    run_dir = one_rank_run("rsl_rl")
    done = islab_train("play", str(run_dir), "--episodes", "2", "--num-envs", "2", "--video", "--envs", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    video = result["video"]
    assert [episode["env"] for episode in video["episodes"]] == [0, 1]
    assert video["mean_return"] == pytest.approx(result["return"]["mean"], abs=1e-4)
    assert min(e["return"] for e in video["episodes"]) == pytest.approx(result["return"]["min"], abs=1e-4)
    more = islab_train("play", str(run_dir), "--num-envs", "4", "--video", "--envs", "5")
    assert more.returncode == 2 and more.stderr.startswith("error: --envs"), more.stderr  # 5 envs of 4


@pytest.mark.slow
def test_play_video_of_quadcopter(tmp_path: Path) -> None:
    trained = islab_train("--lib", "rsl_rl", "--task", "Islab-Quadcopter-v0", "--device", "cpu", "--nproc", "1",
                          "--num-envs", "16", "--max-iterations", "1", "--log-dir", str(tmp_path))  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    (run_dir,) = tmp_path.glob("*/*/*")
    done = islab_train("play", str(run_dir), "--episodes", "1", "--num-envs", "1", "--video", "--video-length", "40")
    assert done.returncode == 0, done.stderr[-3000:]
    (video,) = videos(run_dir)
    record = json.loads(video.with_suffix(".json").read_text())
    frames, meta = decode_mp4(video)
    (episode,) = record["episodes"]
    assert len(frames) == record["frames"] == min(40, episode["length"] + 1)
    assert tuple(meta["size"]) == (320, 240) and meta["fps"] == pytest.approx(50.0)
    assert distinct_frames(frames) >= len(frames) // 2, "the drone does not move on screen"
    assert f"video: {video}" in done.stdout


@pytest.mark.parametrize(
    ("args", "field"),
    [(("--envs", "2"), "--envs"), (("--video-length", "10"), "--video-length"), (("--video", "--envs", "0"), "--envs")],
)
def test_bad_video_options_exit_2(tmp_path: Path, args: tuple[str, ...], field: str) -> None:
    """Refused before the run directory is even read."""
    done = islab_train("play", str(tmp_path), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {field}"), done.stderr
