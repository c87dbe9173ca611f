"""``render()`` of our tasks: Isaac Lab's ``render_mode`` semantics and pictures that follow the state.

With ``render_mode=None`` (the default: training ranks) ``render()`` returns None; with
``"rgb_array"`` a ``(240, 320, 3)`` uint8 frame, ``cfg.viewer.num_envs`` envs tiled, at
``metadata["render_fps"]`` = 1 / step_dt; an unknown mode is refused. The drawings are checked
against the state they draw: the cart is where the state says, the pole leans the way the angle
says, the quadcopter's goal marker moves with the goal.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from islab.envs import ViewerCfg, make_env
from islab.envs.render import ACCENT, BLUE, GOAL

CARTPOLE, QUADCOPTER = "Islab-Cartpole-v0", "Islab-Quadcopter-v0"


def columns_of(frame: np.ndarray, color: tuple[int, int, int]) -> np.ndarray:
    """The pixel columns where ``color`` is drawn."""
    return np.nonzero((frame == np.array(color, np.uint8)).all(axis=2))[1]


@pytest.mark.parametrize("task", [CARTPOLE, QUADCOPTER])
def test_render_mode_semantics(task: str) -> None:
    assert make_env(task, 4, seed=0).render() is None  # no render_mode: no frames (Isaac Lab's None)
    env = make_env(task, 4, seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    assert env.metadata["render_fps"] == pytest.approx(1 / env.step_dt)
    tiled = make_env(task, 4, seed=0, render_mode="rgb_array", viewer=ViewerCfg(num_envs=3))
    tiled.reset(seed=0)
    assert tiled.render().shape == (480, 640, 3)  # 3 envs in a 2 x 2 grid
    with pytest.raises(ValueError, match="render_mode"):
        make_env(task, 4, render_mode="human")


def pole_pixels(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the pole: the accent colour above the track's end marks."""
    rows, cols = np.nonzero((frame == np.array(ACCENT, np.uint8)).all(axis=2))
    above = rows < 125
    return rows[above], cols[above]


def test_cartpole_frame_follows_the_state() -> None:
    env = make_env(CARTPOLE, 2, seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    env.state[0] = torch.tensor([-2.0, 0.0, 0.0, 0.0])  # cart pos, cart vel, pole angle, pole vel: left, upright
    env.state[1] = torch.tensor([2.0, 0.0, 0.6, 0.0])  # right, the pole leaning towards +x
    left, right = env.render_env(0), env.render_env(1)
    assert columns_of(left, BLUE).mean() < 120 < 200 < columns_of(right, BLUE).mean()  # the cart
    _, upright = pole_pixels(left)
    assert np.ptp(upright) < 10  # an upright pole is a vertical bar
    rows, cols = pole_pixels(right)
    assert cols[np.argmin(rows)] > columns_of(right, BLUE).mean() + 10  # its tip right of the cart


def test_quadcopter_goal_marker_moves_with_the_goal() -> None:
    env = make_env(QUADCOPTER, 1, seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    env.desired_pos_w[0, 0] = -2.0
    west = columns_of(env.render(), GOAL).mean()
    env.desired_pos_w[0, 0] = 2.0
    east = columns_of(env.render(), GOAL).mean()
    assert east > west + 40
