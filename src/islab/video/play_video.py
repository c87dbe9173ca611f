"""``islab-train play --video``: the first episode of ``--envs K`` envs, as one MP4 and its returns.

The video is a record of the evaluation itself, not a second run: ``play`` builds its env with
``render_mode="rgb_array"`` and :class:`PlayRecorder` watches the same steps the statistics count
(``islab.policy.play.run_episodes`` calls it after the reset and after every step), so the
episodes on screen are episodes of ``play.json``, played by the same deterministic policy.

What is recorded: envs ``0 .. K-1`` from the evaluation's reset until each has ended its first
episode (an episode batch), or for ``--video-length N`` frames when that comes first (Isaac Lab's
``--video_length``: steps of the clip). Several envs are tiled in one frame; an env whose episode
ended keeps its last frame, darkened, while the others play on (mjlab's renderer draws env 0 and
its neighbours in one scene, so there the picture simply goes on). The first frame is the reset
state, then one frame per policy step, at the env's ``render_fps`` (1 / step_dt, real time).

Written to ``RUN/videos/play/``: ``<stem>.mp4`` and ``<stem>.json`` beside it, the stem naming
the checkpoint's iteration, K and the mean return of the recorded episodes
(``iter_60-envs_2-return_287.3``). The JSON holds each env's return, length, whether its episode
ended within the clip and, where the task defines it, its success.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from islab import rundir
from islab.envs.render import rendered_env_ids, tile
from islab.video.writer import write_mp4

DIM = 0.55  # an ended env's last frame, darkened


@dataclass
class PlayRecorder:
    """Frames and returns of the first episode of the envs ``env.viewer`` shows."""

    env: Any
    max_frames: int | None = None  # --video-length; None: until every recorded episode ended
    frames: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env_ids = rendered_env_ids(self.env.viewer, self.env.num_envs)
        # our envs draw one env at a time (``render_env``), so an ended one can be held; mjlab's cannot
        self._per_env = hasattr(self.env, "render_env")
        count = len(self.env_ids)
        self.returns = [0.0] * count
        self.lengths = [0] * count
        self.ended = [False] * count
        self.successes: list[bool | None] = [None] * count
        self._tiles: list[np.ndarray] = []
        self.recording = True
        self._limit = self.max_frames or self.env.max_episode_length + 1

    def after_reset(self) -> None:
        if self._per_env:
            self._tiles = [self.env.render_env(env_id) for env_id in self.env_ids]
        self._capture()

    def after_step(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        if not self.recording:
            return
        ids = torch.tensor(self.env_ids, device=reward.device)
        rewards, dones = reward[ids].tolist(), (terminated | truncated)[ids].tolist()
        success_of = getattr(self.env, "episode_success", None)
        success = success_of(terminated, truncated)[ids].tolist() if success_of is not None else None
        for slot, env_id in enumerate(self.env_ids):
            if self.ended[slot]:
                continue
            self.returns[slot] += rewards[slot]
            self.lengths[slot] += 1
            if dones[slot]:  # the env has already reset itself: its last picture stays, darkened
                self.ended[slot] = True
                self.successes[slot] = None if success is None else bool(success[slot])
                if self._per_env:
                    self._tiles[slot] = (self._tiles[slot] * DIM).astype(np.uint8)
            elif self._per_env:
                self._tiles[slot] = self.env.render_env(env_id)
        self._capture()
        if all(self.ended) or len(self.frames) >= self._limit:
            self.recording = False

    def _capture(self) -> None:
        if len(self.frames) >= self._limit:
            return
        if self._per_env:
            self.frames.append(self._tiles[0] if len(self._tiles) == 1 else tile(self._tiles))
        else:
            self.frames.append(np.asarray(self.env.render(), dtype=np.uint8))

    def write(self, run_dir: Path, iteration: int, checkpoint: str) -> dict[str, Any]:
        """The MP4 and its JSON in ``RUN/videos/play/``; returns what the JSON holds."""
        mean = sum(self.returns) / len(self.returns)
        stem = rundir.video_stem(iteration, f"envs_{len(self.env_ids)}", f"return_{mean:.1f}")
        folder = rundir.videos_dir(run_dir, "play")
        fps = float(self.env.metadata.get("render_fps", 30.0))
        written = write_mp4(folder / f"{stem}.mp4", self.frames, fps)
        height, width, _ = self.frames[0].shape
        record = {
            "video": str(folder / f"{stem}.mp4"),
            "checkpoint": checkpoint,
            "checkpoint_iteration": iteration,
            "policy": "deterministic (mean action), the library's own inference: the episodes of play.json",
            "frames": written,
            "fps": fps,
            "width": width,
            "height": height,
            "env_ids": self.env_ids,
            "episodes": [
                {"env": env_id, "return": ret, "length": length, "ended": ended, "success": success}
                for env_id, ret, length, ended, success in zip(
                    self.env_ids, self.returns, self.lengths, self.ended, self.successes, strict=True
                )
            ],
            "mean_return": mean,
        }
        rundir.write_json(folder / f"{stem}.json", record)
        return record
