"""``MUJOCO_GL`` for mjlab's renderer: the user's value wins; otherwise egl on a GPU, osmesa on a CPU
(egl through Mesa when only libEGL is there); a renderer that cannot start names what to install."""

from __future__ import annotations

import pytest

from islab.envs.gl_backend import choose_mujoco_gl, no_renderer_message


@pytest.mark.parametrize(
    ("device", "environ", "libraries", "chosen"),
    [("cuda:0", {}, {"OSMesa", "EGL"}, "egl"), ("cpu", {}, {"OSMesa", "EGL"}, "osmesa"),
     ("cpu", {}, {"EGL"}, "egl"), ("cpu", {}, set(), "osmesa"), ("cuda:1", {"MUJOCO_GL": "glfw"}, set(), "glfw")],
)  # fmt: skip
def test_choice(device: str, environ: dict, libraries: set, chosen: str) -> None:
    assert choose_mujoco_gl(device, environ, has_library=libraries.__contains__) == chosen
    assert environ["MUJOCO_GL"] == chosen


def test_the_error_says_what_to_install() -> None:
    message = no_renderer_message("Mjlab-Cartpole-Balance", "osmesa", ImportError("libOSMesa.so: not found"))
    assert message.startswith("error: rendering Mjlab-Cartpole-Balance: ") and "\n" not in message
    assert "apt-get install libosmesa6" in message and "MUJOCO_GL=egl" in message
