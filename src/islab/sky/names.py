"""The facts a task file written by ``islab-train sky`` and the islab-train inside its nodes share.

The variables are SkyPilot's own (sky/skylet/constants.py; docs: "Environment variables for
``run``"); everything else is ours. Free of imports beyond the run directories' mount path, so both
sides -- the task writer and the allocation reader on the launcher side, :mod:`islab.worker.resume`
on the rank side -- read them from one place.
"""

from __future__ import annotations

from islab.k8s.names import RUNS_MOUNT

# `--format job`: `sky launch` (a cluster of your own; preempted = gone). `--format managed`: `sky
# jobs launch` (SkyPilot's jobs controller relaunches a preempted job: setup and run start again).
FORMATS = ("job", "managed")
DEFAULT_FORMAT = "job"

# Set by SkyPilot in every node's `run` (sky/skylet/constants.py).
NODE_RANK_VARIABLE = "SKYPILOT_NODE_RANK"  # 0 .. num_nodes-1
NODE_IPS_VARIABLE = "SKYPILOT_NODE_IPS"  # one IP per line, in node-rank order: the first is node 0
NUM_NODES_VARIABLE = "SKYPILOT_NUM_NODES"
GPUS_PER_NODE_VARIABLE = "SKYPILOT_NUM_GPUS_PER_NODE"  # the count of `accelerators: TYPE:N`, 0 without
# "sky-<timestamp>_<cluster>_<job id>"; a managed job: "sky-managed-<timestamp>_<job name>_<job id>-<task>",
# the same value in every recovery of that job -- so it names the run directory the recovery resumes.
TASK_ID_VARIABLE = "SKYPILOT_TASK_ID"
MANAGED_TASK_PREFIX = "sky-managed-"

# Where the run directories live on a node: the bucket (file_mounts) or volume (volumes) mounted
# there outlives the node, so a recovered managed job finds its checkpoint (the Kubernetes pods'
# volume path: one layout for every container and cloud node islab-train writes a job for).
RUNS_PATH = RUNS_MOUNT
# rclone's VFS cache in front of the bucket: appends (progress.jsonl, the rank logs) and renames
# (the atomic checkpoint write) work, uploads run in the background. MOUNT (goofys/gcsfuse) cannot
# append; SkyPilot's docs name MOUNT_CACHED for checkpoints.
RUNS_STORAGE_MODE = "MOUNT_CACHED"


def is_managed(task_id: str | None) -> bool:
    """A managed job's task id (``sky jobs launch``): the same in every recovery of the job."""
    return bool(task_id) and str(task_id).startswith(MANAGED_TASK_PREFIX)


# The clouds SkyPilot 0.14 knows (sky/skylet/constants.py ALL_CLOUDS; tests/sky/test_sky_schema.py compares
# them with the installed SkyPilot's): resources.infra's first part.
CLOUDS: tuple[str, ...] = (
    "aws", "azure", "gcp", "ibm", "lambda", "scp", "oci", "kubernetes", "runpod", "vast", "vsphere", "cudo",
    "fluidstack", "paperspace", "primeintellect", "do", "nebius", "ssh", "slurm", "hyperbolic", "seeweb",
    "shadeform", "yotta", "mithril", "verda",
)  # fmt: skip
