"""Reading videos back in tests: an MP4 decoded into frames by the same ffmpeg that wrote it.

A test of a video decodes the file (a file that is not a playable MP4 fails here) and checks what a
viewer would see: how many frames, their size, and that the picture changes.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from prerequisites import require_modules


def decode_mp4(path: Path) -> tuple[list[np.ndarray], dict]:
    """Every frame of ``path`` as ``(height, width, 3)`` uint8, and ffmpeg's metadata (codec, size, fps)."""
    require_modules("imageio_ffmpeg")
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(frame, dtype=np.uint8).reshape(height, width, 3) for frame in reader]
    return frames, meta


def distinct_frames(frames: list[np.ndarray], min_pixels: int = 20, level: int = 48) -> int:
    """How many frames differ from the one before in at least ``min_pixels`` pixels by more than
    ``level`` (of 255) in a channel: the picture moved, which H.264's small noise never does."""
    return sum(
        int((np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2) > level).sum()) >= min_pixels
        for a, b in itertools.pairwise(frames)
    )
