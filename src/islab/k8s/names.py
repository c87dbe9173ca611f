"""The facts a Kubernetes manifest written by ``islab-train k8s`` and the islab-train inside its pods share.

Kept free of imports so that both sides -- the manifest builders and the allocation reader on the
launcher side, :mod:`islab.worker.resume` on the rank side -- can read them from one place.
"""

from __future__ import annotations

FORMATS = ("trainjob", "pytorchjob", "jobset", "job")
DEFAULT_FORMAT = "trainjob"
# TrainJob's runtimeRef: the ClusterTrainingRuntime Kubeflow Trainer installs for torchrun jobs.
DEFAULT_RUNTIME = "torch-distributed"

# Where node 0 listens. 29500 is what Kubeflow Trainer's torch plugin injects as PET_MASTER_PORT
# (kubeflow/trainer pkg/constants/constants.go: ContainerTrainerPort); the other formats' manifests
# open the same port so that every format rendezvouses alike.
RENDEZVOUS_PORT = 29500
# The port's name in the pod: PyTorchJob's controller looks the master port up by this name
# (kubeflow/training-operator pkg/apis/kubeflow.org/v1 PyTorchJobDefaultPortName).
PYTORCHJOB_PORT_NAME = "pytorchjob-port"

# Set by our manifests in every container (the controllers inject no such thing):
FORMAT_VARIABLE = "ISLAB_K8S_FORMAT"  # which controller runs the pod: one of FORMATS
JOB_VARIABLE = "ISLAB_K8S_JOB"  # the job's name: names the run directory; pods of a job resume its checkpoints
# Job and JobSet only (the Kubeflow controllers inject their own, PET_*):
NNODES_VARIABLE = "ISLAB_K8S_NNODES"  # the number of pods (an Indexed Job's completions)
MASTER_VARIABLE = "ISLAB_K8S_MASTER_ADDR"  # pod 0's DNS name (JobSet: its coordinator annotation)

# The run directories' volume in the pod (the --logs-pvc claim, or an emptyDir without one).
RUNS_MOUNT = "/islab/runs"
