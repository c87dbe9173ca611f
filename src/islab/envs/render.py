"""Frames of our own tasks: a small numpy canvas, and what Isaac Lab's ``render()`` promises.

Isaac Lab's ``DirectRLEnv.render(recompute=False)`` returns, when the env was built with
``render_mode="rgb_array"``, one ``uint8`` array of shape ``(height, width, 3)``: the viewport
camera's picture, which follows ``cfg.viewer`` (``ViewerCfg``; its ``env_index`` picks the env the
camera looks at); with ``render_mode=None`` it returns ``None``. gymnasium's ``RecordVideo``, and
Isaac Lab's and mjlab's train/play scripts, turn those frames into MP4s. Our tasks have no
renderer, so each draws a clear diagram of one env instead (Cartpole: track, cart and pole;
Quadcopter: the drone's pose and its goal, from the side and from above) on a :class:`Canvas`,
with plain numpy: a frame costs well under a millisecond and needs no OpenGL, no display and no
extra package. ``ViewerCfg.num_envs`` > 1 tiles that many envs (``env_index``, the next ones, ...)
in a grid, which is what ``islab-train play --video --envs K`` shows.

Coordinates: a canvas maps a world rectangle (metres) onto its pixels, y upwards; shapes are
filled with hard edges (no anti-aliasing), which H.264 compresses well.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Color = tuple[int, int, int]

BACKGROUND: Color = (246, 246, 242)
INK: Color = (40, 40, 48)
GRID: Color = (214, 214, 208)
ACCENT: Color = (214, 96, 40)
GOAL: Color = (46, 160, 67)
BLUE: Color = (52, 101, 164)


@dataclass
class ViewerCfg:
    """Isaac Lab's ``ViewerCfg`` in the part our frames use (mjlab's ``ViewerConfig`` names in the
    comments): which env is shown, how many, and the frame size. Width and height default to
    mjlab's 320 x 240 and stay multiples of 16, which H.264 encoders want."""

    env_index: int = 0  # the env the camera looks at (mjlab: env_idx)
    num_envs: int = 1  # envs shown: env_index and the next ones, tiled (mjlab: 1 + max_extra_envs)
    width: int = 320
    height: int = 240


class Canvas:
    """One RGB frame and a world rectangle ``(x_min, x_max) x (y_min, y_max)`` mapped onto it."""

    def __init__(self, width: int, height: int, x_range: tuple[float, float], y_range: tuple[float, float]) -> None:
        self.pixels = np.empty((height, width, 3), dtype=np.uint8)
        self.pixels[:] = BACKGROUND
        self.width, self.height = width, height
        (self._x0, x1), (self._y0, y1) = x_range, y_range
        # one scale for both axes, so circles stay round; the world rectangle is centred
        self.scale = min(width / (x1 - self._x0), height / (y1 - self._y0))
        self._x_off = (width - self.scale * (x1 - self._x0)) / 2
        self._y_off = (height - self.scale * (y1 - self._y0)) / 2
        self._cols = np.arange(width)[None, :] + 0.5
        self._rows = np.arange(height)[:, None] + 0.5

    def to_pixel(self, x: float, y: float) -> tuple[float, float]:
        """World (x, y) -> pixel (column, row); rows grow downwards."""
        return self._x_off + (x - self._x0) * self.scale, self.height - self._y_off - (y - self._y0) * self.scale

    def _window(self, u0: float, v0: float, u1: float, v1: float) -> tuple[slice, slice] | None:
        """The pixel rows and columns of a bounding box, clipped to the frame (None: outside)."""
        c0, c1 = max(math.floor(min(u0, u1)), 0), min(math.ceil(max(u0, u1)) + 1, self.width)
        r0, r1 = max(math.floor(min(v0, v1)), 0), min(math.ceil(max(v0, v1)) + 1, self.height)
        return None if c0 >= c1 or r0 >= r1 else (slice(r0, r1), slice(c0, c1))

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
        """A filled axis-aligned rectangle between two world corners."""
        (u0, v0), (u1, v1) = self.to_pixel(x0, y0), self.to_pixel(x1, y1)
        window = self._window(u0, v0, u1, v1)
        if window is not None:
            self.pixels[window] = color

    def disk(self, x: float, y: float, radius_px: float, color: Color) -> None:
        """A filled circle of ``radius_px`` pixels around world (x, y)."""
        u, v = self.to_pixel(x, y)
        window = self._window(u - radius_px, v - radius_px, u + radius_px, v + radius_px)
        if window is None:
            return
        rows, cols = window
        inside = (self._cols[:, cols] - u) ** 2 + (self._rows[rows] - v) ** 2 <= radius_px**2
        self.pixels[rows, cols][inside] = color  # a basic slice is a view: this writes the frame

    def line(self, a: tuple[float, float], b: tuple[float, float], width_px: float, color: Color) -> None:
        """A segment between world points ``a`` and ``b``, ``width_px`` pixels thick (round caps)."""
        (u0, v0), (u1, v1) = self.to_pixel(*a), self.to_pixel(*b)
        half = width_px / 2
        window = self._window(min(u0, u1) - half, min(v0, v1) - half, max(u0, u1) + half, max(v0, v1) + half)
        if window is None:
            return
        rows, cols = window
        du, dv = u1 - u0, v1 - v0
        length2 = max(du * du + dv * dv, 1e-12)
        pu, pv = self._cols[:, cols] - u0, self._rows[rows] - v0
        t = np.clip((pu * du + pv * dv) / length2, 0.0, 1.0)  # the nearest point of the segment
        near = (pu - t * du) ** 2 + (pv - t * dv) ** 2 <= half * half
        self.pixels[rows, cols][near] = color

    def dashed_hline(self, y: float, color: Color, dash_px: int = 6) -> None:
        """A horizontal dashed line across the whole frame at world height ``y`` (limits, bounds)."""
        row = int(self.to_pixel(0.0, y)[1])
        if 0 <= row < self.height:
            columns = np.arange(self.width)
            self.pixels[row, (columns // dash_px) % 2 == 0] = color


def tile(frames: Sequence[np.ndarray], columns: int | None = None) -> np.ndarray:
    """Frames of one size in a grid (row by row; empty cells stay background): K envs in one frame."""
    count = len(frames)
    columns = columns or math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    height, width, _ = frames[0].shape
    grid = np.empty((rows * height, columns * width, 3), dtype=np.uint8)
    grid[:] = BACKGROUND
    for index, frame in enumerate(frames):
        row, column = divmod(index, columns)
        grid[row * height : (row + 1) * height, column * width : (column + 1) * width] = frame
    if rows > 1 or columns > 1:  # thin separators between the cells
        grid[::height] = GRID
        grid[:, ::width] = GRID
    return grid


def rendered_env_ids(viewer: ViewerCfg, num_envs: int) -> list[int]:
    """The envs a frame shows: ``viewer.env_index`` and the next ones, wrapping round, at most all."""
    count = max(1, min(viewer.num_envs, num_envs))
    return [(viewer.env_index + offset) % num_envs for offset in range(count)]
