"""Placement risks a launch can see before any rank starts -- pure: the ranks' environment comes in.

Two ways a multi-GPU job ends up with ranks sharing a GPU, or waiting on one that cannot work:

* ``CUDA_VISIBLE_DEVICES`` naming a GPU twice (``0,0``): CUDA enumerates each device once, so the
  list does not give every rank a GPU of its own; torch's own parser reads a repeated entry as no
  GPU at all (``torch.cuda._parse_visible_devices``: "Repeated ordinal results in empty set"). The
  launch is refused (:func:`cuda_visible_devices_issue`). Too few entries for ``--gpus N`` are
  refused by :func:`islab.plan.launch_issues.gpu_issue`, over the launcher's count of the GPUs the
  ranks will see; at run time the probe refuses two ranks with one GPU UUID.
* ``--isaaclab`` with cameras on more than one GPU per node: Isaac Sim renders only on ``cuda:0``
  ("GPUs other than cuda:0 are not currently supported", Isaac Lab issue 5562: the ranks on
  ``cuda:1``.. fail to render and the job hangs at its first broadcast). Cameras are on with
  AppLauncher's ``--enable_cameras``, ``ENABLE_CAMERAS=1``, or Isaac Lab's ``train.py --video``
  (which turns them on to record). A warning (:func:`camera_warning`): newer Isaac Sim versions may
  lift the limit, and the check cannot see which one the ranks run.
"""

from __future__ import annotations

from collections.abc import Mapping

from islab.spec.issues import Issue
from islab.spec.run_spec import RunSpec

CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
CAMERA_FLAG = "--enable_cameras"  # Isaac Lab's AppLauncher
VIDEO_FLAG = "--video"  # Isaac Lab's train.py: "always enable cameras to record video"
CAMERA_ENV = "ENABLE_CAMERAS"  # AppLauncher reads it when the flag is absent (0 or 1)


def _ordinal(entry: str) -> str:
    """What CUDA compares: an index by its number (``00`` is ``0``), a UUID (prefix) by its text."""
    digits = len(entry) - len(entry.lstrip("0123456789"))
    return str(int(entry[:digits])) if digits else entry


def repeated_device(value: str) -> str | None:
    """The first entry of a CUDA_VISIBLE_DEVICES value that names a device named before it, among
    the entries CUDA reads (up to the first empty or negative one); None when there is none."""
    seen: set[str] = set()
    for entry in (part.strip() for part in value.split(",")):
        if not entry or entry.startswith("-"):
            return None
        if _ordinal(entry) in seen:
            return entry
        seen.add(_ordinal(entry))
    return None


def cuda_visible_devices_issue(spec: RunSpec, environ: Mapping[str, str]) -> Issue | None:
    """A GPU job whose ranks would see a CUDA_VISIBLE_DEVICES that names a GPU twice (the spec's
    ``env:`` over ``environ``, as the ranks get them)."""
    value = spec.env.get(CUDA_VISIBLE, environ.get(CUDA_VISIBLE))
    if spec.device != "cuda" or value is None:
        return None
    twice = repeated_device(value)
    if twice is None:
        return None
    where = "the cluster file's env:" if CUDA_VISIBLE in spec.env else "this shell"
    distinct = list(dict.fromkeys(_ordinal(e.strip()) for e in value.split(",") if e.strip()))
    return Issue(
        CUDA_VISIBLE,
        f"{CUDA_VISIBLE}={value} (from {where}) names GPU {twice} twice, so the ranks would not get one GPU "
        "each: CUDA enumerates a device once (torch reads a repeated entry as no GPU at all), and ranks on one "
        "GPU compete for its memory and NCCL refuses them",
        f"List each GPU once, e.g. {CUDA_VISIBLE}={','.join(distinct)}, with --gpus at most that many; or unset "
        f"{CUDA_VISIBLE} and let --gpus N use the node's first N GPUs",
    )


def cameras_on(spec: RunSpec, environ: Mapping[str, str]) -> str | None:
    """How an Isaac Lab entry point turns cameras on, as the user would recognise it; None: off."""
    args = list(spec.args or ())
    if any(arg == CAMERA_FLAG or arg.startswith(f"{CAMERA_FLAG}=") for arg in args):
        return CAMERA_FLAG
    if spec.isaaclab and VIDEO_FLAG in args:
        return f"{VIDEO_FLAG} (Isaac Lab's train.py turns cameras on to record)"
    if spec.isaaclab and {**environ, **spec.env}.get(CAMERA_ENV, "").strip() == "1":
        return f"{CAMERA_ENV}=1"
    return None


def camera_warning(spec: RunSpec, environ: Mapping[str, str]) -> str | None:
    """The warning for cameras on more than one GPU of a node (an Isaac Lab entry point)."""
    if spec.device != "cuda" or spec.nproc_per_node < 2 or spec.entrypoint is None:
        return None
    how = cameras_on(spec, environ)
    if how is None:
        return None
    return (
        f"warning: cameras are enabled ({how}) on {spec.nproc_per_node} GPUs per node, but Isaac Sim renders "
        'cameras only on cuda:0 ("GPUs other than cuda:0 are not currently supported"; Isaac Lab issue 5562: '
        "the ranks on cuda:1 and up fail to render and the job hangs at its first broadcast). Train a camera "
        "task with one GPU per node (--gpus 1, and more nodes to scale), or drop "
        f"{how.split(' ')[0]} if the task has no camera"
    )
