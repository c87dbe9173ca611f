"""``--video-interval N``: rank 0 records one env's episode at the start and every N iterations.

Isaac Lab's and mjlab's train scripts wrap the env in a video recorder (gymnasium's
``RecordVideo``, mjlab's ``VideoRecorder``) that records the training env's env 0 while it trains,
with a step trigger; mjlab does it on rank 0 only, so that the ranks do not write the same files.
:class:`TrainingVideoRecorder` does the same in one place for every library: the worker builds
rank 0's env with ``render_mode="rgb_array"`` (every other rank's env has no renderer at all) and
hands it to the recorder, which puts a thin wrapper on that env's ``step`` (an instance attribute:
each library's env wrapper calls ``env.step``, so all of them pass through it) and is an
iteration hook (``LibraryAdapter.iteration_hooks``).

What it records: after the start and after every N-th iteration it waits for env 0's current
episode to end, then records its next episode whole, from the reset state to its last step, as the
training policy plays it (the stochastic actions it learns from). The recorded frames go out at the
next iteration hook: ``videos/train/iter_<N>.mp4`` with ``iter_<N>.json`` beside it (return,
length, frames, the rank), a clip in TensorBoard (tag ``video/train``, events in
``videos/train/``; TensorBoard shows clips as animated GIFs, written at half size and half rate to
keep them small) and, with ``--logger wandb``, ``video/train`` in the W&B run. An episode still
being recorded when training ends is dropped.

Cost: while it waits and records (about two episodes every N iterations) each env step reads env
0's done flag and reward (one host sync on a GPU) and draws a frame; the encoding runs in the hook.
docs/benchmarks.md has the measured cost per iteration.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from islab import rundir
from islab.video.writer import require_writer, write_mp4

TAG = "video/train"


def gif_bytes(frames: list[np.ndarray], fps: float) -> bytes:
    """An animated GIF of ``frames`` at half size and half rate (TensorBoard's clip format)."""
    from PIL import Image

    small = [Image.fromarray(np.ascontiguousarray(frame[::2, ::2])) for frame in frames[::2]]
    buffer = io.BytesIO()
    duration_ms = max(round(2000 / fps), 20)
    small[0].save(buffer, format="GIF", save_all=True, append_images=small[1:], duration=duration_ms, loop=0)
    return buffer.getvalue()


def tensorboard_clip(writer: Any, tag: str, frames: list[np.ndarray], fps: float, step: int) -> None:
    """One clip into TensorBoard's events (``writer``: torch's ``FileWriter``): an image summary
    holding a GIF, which is what ``SummaryWriter.add_video`` writes (here without its moviepy)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    height, width = (-(-size // 2) for size in frames[0].shape[:2])  # the GIF's half size, rounded up
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif_bytes(frames, fps))
    writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), global_step=step)
    writer.flush()  # on disk now: a rank forked from torchrun's agent may end with os._exit


class TrainingVideoRecorder:
    """Rank 0's recorder: a wrapper on ``env.step`` and an iteration hook (see the module docstring)."""

    def __init__(self, env: Any, run_dir: Path, interval: int, start_iteration: int, wandb_run: Any = None) -> None:
        require_writer()
        self.env, self.interval, self.wandb_run = env, interval, wandb_run
        self.folder = rundir.videos_dir(run_dir, "train")
        self.fps = float(env.metadata.get("render_fps", 30.0))
        self._limit = int(env.max_episode_length) + 1  # frames of the longest episode
        self._wanted: int | None = None  # the iteration a video is wanted for (waiting or recording)
        self._recording = False
        self._frames: list[np.ndarray] = []
        self._return, self._length = 0.0, 0
        self._done: list[tuple[int, list[np.ndarray], float, int, float]] = []  # recorded, not yet written
        self.written: list[Path] = []
        self._events: Any = None  # TensorBoard's event file writer, made with the first clip
        self._step_seconds = 0.0  # rendering and flag reads for the video being made (docs/benchmarks.md)
        self._inner_step: Callable[[torch.Tensor], Any] = env.step
        env.step = self._step  # an instance attribute: every caller of env.step goes through it
        self._wanted = start_iteration

    def _step(self, action: torch.Tensor) -> Any:
        result = self._inner_step(action)
        if self._wanted is None:
            return result
        started = time.perf_counter()
        _, reward, terminated, truncated, _ = result
        done, step_reward = torch.stack(((terminated[0] | truncated[0]).to(reward.dtype), reward[0])).tolist()
        if self._recording:
            self._return += step_reward
            self._length += 1
            if done or len(self._frames) >= self._limit:  # the env has reset itself: the episode is whole
                spent = self._step_seconds + time.perf_counter() - started
                self._done.append((self._wanted, self._frames, self._return, self._length, spent))
                self._wanted, self._recording, self._frames, self._step_seconds = None, False, [], 0.0
                return result
            self._frames.append(self.env.render())
        elif done:  # env 0 starts a new episode now: its reset state is the first frame
            self._recording, self._return, self._length = True, 0.0, 0
            self._frames = [self.env.render()]
        self._step_seconds += time.perf_counter() - started
        return result

    def __call__(self, adapter: Any, iteration: int, max_iterations: int) -> None:
        """After every iteration (rank 0): write what was recorded; want a video every N iterations."""
        del max_iterations
        for wanted, frames, episode_return, length, step_seconds in self._done:
            self._write(wanted, frames, episode_return, length, int(getattr(adapter, "job_env_steps", 0)), step_seconds)
        self._done = []
        if self._wanted is None and iteration % self.interval == 0:
            self._wanted = iteration

    def _write(
        self, iteration: int, frames: list[np.ndarray], episode_return: float, length: int, env_steps: int,
        step_seconds: float,
    ) -> None:  # fmt: skip
        started = time.perf_counter()
        path = self.folder / f"{rundir.video_stem(iteration)}.mp4"
        count = write_mp4(path, frames, self.fps)
        if self._events is None:
            from torch.utils.tensorboard.writer import FileWriter

            self._events = FileWriter(str(self.folder))
        tensorboard_clip(self._events, TAG, frames, self.fps, iteration)
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({TAG: wandb.Video(str(path), format="mp4")}, step=env_steps)
        height, width, _ = frames[0].shape
        rundir.write_json(path.with_suffix(".json"), {
            "video": str(path), "iteration": iteration, "rank": 0, "env": 0, "return": episode_return,
            "length": length, "frames": count, "fps": self.fps, "width": width, "height": height,
            "policy": "the training policy (stochastic actions), env 0 of rank 0",
            # what this video cost the training process: the steps' rendering and reads, then the encoding
            "cost_s": {"steps": step_seconds, "write": time.perf_counter() - started},
        })  # fmt: skip
        self.written.append(path)
        print(f"[islab] rank 0 recorded {path} (iteration {iteration}, return {episode_return:.2f})", flush=True)
