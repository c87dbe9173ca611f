"""README's video frames: one frame of ``islab-train play --video`` for Cartpole and Quadcopter.

    python scripts/video_frames.py                      # trains both, plays, writes docs/figures/video_*.png
    python scripts/video_frames.py --cartpole RUN_DIR   # use a trained Cartpole run instead of training one

Each task is trained on 2 CPU ranks through the real ``islab-train`` (rsl_rl, 25 iterations x 256
envs per rank: short, so that it runs in minutes on a busy 2-core machine), then
``islab-train play RUN --video`` records it (Cartpole: ``--envs 2``); the frame ``--frame`` (default
90: 1.5 s into a Cartpole episode; earlier, half the shortest recorded episode, when that ends
sooner) of the MP4, decoded back, is written as a PNG under
docs/figures/ with the run's return in the log line. Needs the ``[video]`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TRAINING = {
    "Islab-Cartpole-v0": ("--max-iterations", "25"),
    "Islab-Quadcopter-v0": ("--max-iterations", "25"),
}
PLAY = {"Islab-Cartpole-v0": ("--envs", "2"), "Islab-Quadcopter-v0": ("--video-length", "250")}


def islab_train(*args: str) -> subprocess.CompletedProcess:
    environment = {name: value for name, value in os.environ.items() if not name.startswith("ISLAB_")}
    done = subprocess.run([sys.executable, "-m", "islab.cli", *args], capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        raise SystemExit(f"islab-train {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def trained_run(task: str, log_dir: Path) -> Path:
    islab_train("--lib", "rsl_rl", "--task", task, "--device", "cpu", "--nproc", "2", "--num-envs", "256",
                *TRAINING[task], "--log-dir", str(log_dir))  # fmt: skip
    (run_dir,) = log_dir.glob("*/*/*")
    return run_dir


def frame_of(video: Path, index: int) -> np.ndarray:
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(video))
    width, height = next(reader)["size"]
    frames = [np.frombuffer(frame, dtype=np.uint8).reshape(height, width, 3) for frame in reader]
    return frames[min(index, len(frames) - 1)]


def main() -> None:
    from PIL import Image

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cartpole", type=Path, help="a trained Islab-Cartpole-v0 run directory")
    parser.add_argument("--quadcopter", type=Path, help="a trained Islab-Quadcopter-v0 run directory")
    parser.add_argument("--frame", type=int, default=90)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "figures")
    args = parser.parse_args()
    given = {"Islab-Cartpole-v0": args.cartpole, "Islab-Quadcopter-v0": args.quadcopter}
    with tempfile.TemporaryDirectory(prefix="islab-video-frames-") as scratch:
        for task, run_dir in given.items():
            run_dir = run_dir or trained_run(task, Path(scratch, task))
            done = islab_train("play", str(run_dir), "--video", *PLAY[task], "--json")
            video = json.loads(done.stdout)["video"]
            name = task.removeprefix("Islab-").removesuffix("-v0").lower()
            target = args.out / f"video_{name}.png"
            # before the first recorded episode ends (an ended env's tile is darkened)
            index = min(args.frame, min(episode["length"] for episode in video["episodes"]) // 2)
            Image.fromarray(frame_of(Path(video["video"]), index)).save(target)
            returns = [episode["return"] for episode in video["episodes"]]
            print(f"{target}: frame {index} of {video['video']} (returns {returns})")


if __name__ == "__main__":
    main()
