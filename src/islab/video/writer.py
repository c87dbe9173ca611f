"""MP4 files from frames, through imageio-ffmpeg (the ``[video]`` extra).

Why imageio-ffmpeg rather than PyAV: its wheel carries a static ffmpeg binary (nothing to
install with apt, no system FFmpeg libraries to match), its API is a generator that takes raw
RGB frames and hands them to that binary's H.264 encoder, and mjlab already depends on it, so
``.venv-mjlab`` gets no second video stack. PyAV binds FFmpeg's C libraries, which is faster per
frame but a larger wheel and an API that changes between its major versions; our frames are few
and small (320 x 240), so encoding costs milliseconds either way (docs/benchmarks.md).

Files are H.264 in yuv420p (what browsers, TensorBoard's and W&B's players and every desktop
player decode) at the env's ``render_fps``, written under a temporary name and renamed, so a
reader never sees half a video.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from islab.spec.issues import install_extra_hint

EXTRA = "video"


class VideoUnavailable(RuntimeError):
    """No MP4 writer in this Python: the message says how to install one."""


def _imageio_ffmpeg():  # the module, imported only when a video is written
    try:
        import imageio_ffmpeg
    except ImportError as error:
        raise VideoUnavailable(
            f"error: --video: writing MP4s needs imageio-ffmpeg (the [{EXTRA}] extra), which is not installed "
            f"for {sys.executable}. {install_extra_hint(EXTRA)}"
        ) from error
    return imageio_ffmpeg


def require_writer() -> None:
    """Raise :class:`VideoUnavailable` now, before any work that would end in a video."""
    _imageio_ffmpeg()


def write_mp4(path: Path, frames: Iterable[np.ndarray], fps: float) -> int:
    """Encode ``(height, width, 3)`` uint8 frames, all of one size, into ``path``; returns how many
    were written. Sizes should be multiples of 16 (``islab.envs.render.ViewerCfg`` keeps them so);
    others are padded by ffmpeg."""
    imageio_ffmpeg = _imageio_ffmpeg()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")  # ffmpeg picks the format by suffix
    iterator = iter(frames)
    first = next(iterator, None)
    if first is None:
        raise ValueError(f"{path}: no frames to write")
    height, width, _ = first.shape
    writer = imageio_ffmpeg.write_frames(
        str(partial), (width, height), fps=float(fps), codec="libx264", pix_fmt_out="yuv420p", macro_block_size=16,
        ffmpeg_log_level="error",
    )  # fmt: skip
    writer.send(None)  # start ffmpeg
    count = 0
    try:
        for frame in (first, *iterator):
            writer.send(np.ascontiguousarray(frame, dtype=np.uint8))
            count += 1
    finally:
        writer.close()  # waits for ffmpeg to finish the file
    os.replace(partial, path)
    return count
