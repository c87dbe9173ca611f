"""Can this node launch the plan? Pure: the machine's facts (platform, visible GPUs) come in as arguments.

A dry run skips these; ``doctor`` shows the platform and GPU ones as its rows.
"""

from __future__ import annotations

from collections.abc import Mapping

from islab.plan import torchrun
from islab.plan.placement import cuda_visible_devices_issue
from islab.spec.issues import Issue
from islab.spec.run_spec import RunSpec


def launch_issues(
    spec: RunSpec,
    *,
    platform: str,
    visible_gpus: int,
    environ: Mapping[str, str] | None = None,
    device_defaulted: bool = False,
) -> list[Issue]:
    """Reasons a *real* launch of ``spec`` cannot start on this node (a dry run skips these).
    The doctor shows the platform and GPU ones as its rows; it does not check them again.
    ``environ``: this shell's environment (the ranks get the spec's ``env:`` on top), for a
    CUDA_VISIBLE_DEVICES that names a GPU twice -- the cause, named instead of the GPU count it spoils.
    ``device_defaulted``: nothing chose the device (cuda is the default), so no-GPU says that."""
    devices = cuda_visible_devices_issue(spec, environ or {})
    gpus = devices or gpu_issue(spec, visible_gpus, device_defaulted=device_defaulted)
    found = (platform_issue(spec.device, platform), node_rank_issue(spec), gpus)
    return [issue for issue in found if issue is not None]


def platform_issue(device: str, platform: str) -> Issue | None:
    if not platform.startswith(("win", "cygwin")):
        return None
    if device == "cuda":
        return Issue(
            "device",
            "GPU training needs NCCL, which only exists on Linux",
            "Run on a Linux machine or in WSL2; --dry-run still prints the plan here",
        )
    return Issue(
        "platform",
        "islab-train supervises ranks with POSIX process groups and signals, which Windows lacks",
        "Run it in WSL2 (CPU ranks over gloo work there); --dry-run still prints the plan here",
    )


def node_rank_issue(spec: RunSpec) -> Issue | None:
    """Each node starts its own launcher and must know which node it is -- except with torchrun's
    c10d rendezvous, where torchrun assigns the node ranks."""
    assigned = spec.launcher == torchrun.NAME and spec.rendezvous.backend == "c10d"
    if spec.nnodes == 1 or assigned or spec.node_rank is not None:
        return None
    return Issue(
        "node_rank",
        f"this is a {spec.nnodes}-node run and each node starts its own launcher, "
        "but this one was not told which node it is",
        "Pass --node-rank 0 on the first node, --node-rank 1 on the second, and so on "
        "(--dry-run prints every node's command)",
    )


def gpu_issue(spec: RunSpec, visible_gpus: int, *, device_defaulted: bool = False) -> Issue | None:
    if spec.device != "cuda":
        return None
    if visible_gpus == 0 and device_defaulted:  # a plain `islab-train` on a laptop: nothing asked for cuda
        return Issue(
            "device",
            "cuda is the default device (no --device or --gpus was given) and no CUDA device is visible on this "
            "machine (CUDA_VISIBLE_DEVICES / nvidia-smi)",
            "For CPU ranks over gloo give --device cpu --nproc N, N ranks sharing this machine's cores "
            "(e.g. --device cpu --nproc 2)",
        )
    if visible_gpus == 0:
        return Issue(
            "device",
            "cuda was asked for but no CUDA device is visible on this machine (CUDA_VISIBLE_DEVICES / nvidia-smi)",
            f"Use --device cpu --nproc {spec.nproc_per_node} for CPU ranks over gloo",
        )
    if spec.nproc_per_node > visible_gpus:
        return Issue(
            "nproc_per_node",
            f"{spec.nproc_per_node} GPU processes per node need {spec.nproc_per_node} GPUs "
            f"but {visible_gpus} are visible to the ranks (CUDA_VISIBLE_DEVICES from the spec's env: or this "
            "shell), so ranks would share a GPU",
            f"Use --gpus {visible_gpus}, or --device cpu --nproc {spec.nproc_per_node}",
        )
    return None
