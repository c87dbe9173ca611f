"""Which OpenGL MuJoCo renders offscreen with (``MUJOCO_GL``), chosen before MuJoCo is imported.

MuJoCo's Python bindings read ``MUJOCO_GL`` once, when ``mujoco`` is imported
(``mujoco/rendering/classic/gl_context.py``): ``egl`` (headless, on the GPU's driver), ``osmesa``
(software rendering on the CPU, Mesa's libOSMesa) or ``glfw`` (a window). mjlab's package sets
``egl`` by default when it is imported (``os.environ.setdefault``), which fails on a machine with
no GPU driver. So before an mjlab task is imported for rendering, :func:`choose_mujoco_gl` sets it
unless the user did: ``egl`` for a CUDA device, ``osmesa`` on a CPU (``egl`` through Mesa when
libOSMesa is missing but libEGL is there). When MuJoCo still cannot open a context,
:func:`no_renderer_message` says what to install.
"""

from __future__ import annotations

import ctypes.util
from collections.abc import MutableMapping

VARIABLE = "MUJOCO_GL"
INSTALL = {
    "osmesa": "libOSMesa (Debian/Ubuntu: apt-get install libosmesa6)",
    "egl": "libEGL and a GPU driver that provides EGL (NVIDIA's driver; Debian/Ubuntu: apt-get install libegl1)",
}


def _has_library(name: str) -> bool:
    return ctypes.util.find_library(name) is not None


def choose_mujoco_gl(device: str, environ: MutableMapping[str, str], has_library=_has_library) -> str:
    """``MUJOCO_GL`` for a renderer on ``device``: the user's value when set, else ``egl`` on a GPU,
    ``osmesa`` on a CPU (``egl`` when only libEGL is there: Mesa renders it in software). Sets it
    in ``environ`` and returns it."""
    chosen = environ.get(VARIABLE, "").strip().lower()
    if not chosen:
        if device.startswith("cuda"):
            chosen = "egl"
        elif has_library("OSMesa") or not has_library("EGL"):
            chosen = "osmesa"
        else:
            chosen = "egl"
        environ[VARIABLE] = chosen
    return chosen


def no_renderer_message(task_id: str, backend: str, error: BaseException) -> str:
    """One paragraph: which renderer failed, why, and what to install or set instead."""
    other = "egl" if backend == "osmesa" else "osmesa"
    need = INSTALL.get(backend, f"a working {backend!r} OpenGL")
    return (
        f"error: rendering {task_id}: MuJoCo's offscreen renderer with {VARIABLE}={backend} failed "
        f"({type(error).__name__}: {error}). {VARIABLE}={backend} needs {need}; or set {VARIABLE}={other}, "
        f"which needs {INSTALL[other]}. islab-train sets {VARIABLE}=egl on GPUs and osmesa on CPUs unless you set it."
    )
