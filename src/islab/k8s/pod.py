"""The pod every format runs: one islab-train per pod, and what experienced users expect of it.

Every format's manifest (:mod:`islab.k8s.manifests`) wraps the same pod:

* the container runs **islab-train itself**, not a bare torchrun, so progress, hang detection,
  failure naming, checkpoints and preemption work as on SLURM; its place in the job comes from
  the controller (:mod:`islab.k8s.allocation`);
* ``nvidia.com/gpu`` limits = ranks per node (none for CPU ranks): one rank per GPU;
* ``/dev/shm`` is an ``emptyDir`` of medium ``Memory``: a container's default 64 MB breaks NCCL
  and the data loaders;
* ``terminationGracePeriodSeconds`` above islab-train's own preemption grace
  (:data:`islab.spec.stopping.PREEMPT_GRACE_S`), so that the SIGTERM of a pod deletion, eviction or
  preemption ends with ``checkpoints/latest.pt`` written, not with the kubelet's SIGKILL;
* the run directories live on the ``--logs-pvc`` claim: a pod started again (a container
  restart, a new pod of the same job) finds its job's run directory ``k8s-<name>`` and resumes
  from its checkpoint (:mod:`islab.worker.resume`), as a requeued SLURM job does;
* env values that look secret (``*_TOKEN``, ``*_KEY``, ``*SECRET*``, ``*PASSWORD*``:
  :func:`islab.spec.issues.is_secret_name`) are never written, only a ``secretKeyRef`` to a
  key of the same name in the Secret ``--secret`` (docs/KUBERNETES.md says how to create it);
* labels that identify the run (``app.kubernetes.io/*``, ``islab-train/lib``, ``islab-train/task``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from islab.k8s.names import FORMAT_VARIABLE, JOB_VARIABLE, RENDEZVOUS_PORT, RUNS_MOUNT
from islab.k8s.options import K8sOptions, label_value
from islab.spec.issues import is_secret_name
from islab.spec.stopping import PREEMPT_GRACE_S

# The kubelet's SIGKILL must come after islab-train's own: its grace, then time to write the
# checkpoint and the launch record and exit.
TERMINATION_GRACE_S = int(PREEMPT_GRACE_S) + 30
# How often a pod may fail (container restarts included) before its job counts as failed.
RESTARTS_PER_POD = 3
GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
RUNS_VOLUME = "runs"
Manifest = dict[str, Any]


@dataclass(frozen=True)
class PodJob:
    """What every pod of the job runs, whatever the format wraps it in."""

    options: K8sOptions
    command: tuple[str, ...]  # islab-train's argv in the container
    nnodes: int
    nproc_per_node: int
    device: str
    lib: str
    task: str
    env: Mapping[str, str] = field(default_factory=dict)  # the spec's env
    min_nnodes: int | None = None  # elastic membership: MIN of nnodes MIN:MAX

    @property
    def gpus(self) -> int:
        return self.nproc_per_node if self.device == "cuda" else 0


def labels(job: PodJob) -> dict[str, str]:
    """Labels on every object and pod of the run: ``kubectl get pods -l app.kubernetes.io/instance=<name>``."""
    found = {
        "app.kubernetes.io/name": "islab-train",
        "app.kubernetes.io/instance": job.options.name,
        "app.kubernetes.io/managed-by": "islab-train",
        "islab-train/lib": label_value(job.lib),
        "islab-train/task": label_value(job.task),
    }
    return {key: value for key, value in found.items() if value}


def metadata(job: PodJob, name: str | None = None) -> Manifest:
    meta: Manifest = {"name": name or job.options.name}
    if job.options.namespace:
        meta["namespace"] = job.options.namespace
    meta["labels"] = labels(job)
    return meta


def env_entries(env: Mapping[str, str], secret: str) -> list[Manifest]:
    """``env`` as container env entries; secret-looking values as a secretKeyRef, never in clear."""
    entries = []
    for name, value in env.items():
        if is_secret_name(name):
            entries.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}})
        else:
            entries.append({"name": name, "value": str(value)})
    return entries


def job_env(job: PodJob, fmt: str, extra: list[Manifest] | None = None) -> list[Manifest]:
    """What our manifest adds to the container's env (the controller adds its own, see allocation)."""
    ours = [{"name": FORMAT_VARIABLE, "value": fmt}, {"name": JOB_VARIABLE, "value": job.options.name}]
    return [*ours, *(extra or []), *env_entries(job.env, job.options.secret)]


def resources(job: PodJob) -> Manifest:
    requests = {key: value for key, value in (("cpu", job.options.cpu), ("memory", job.options.memory)) if value}
    found: Manifest = {}
    if requests:
        found["requests"] = requests
    if job.gpus:
        found["limits"] = {GPU_RESOURCE: job.gpus}  # extended resources: limits only (requests follow)
    return found


def volume_mounts() -> list[Manifest]:
    return [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}, {"name": RUNS_VOLUME, "mountPath": RUNS_MOUNT}]


def volumes(job: PodJob) -> list[Manifest]:
    runs: Manifest = (
        {"name": RUNS_VOLUME, "persistentVolumeClaim": {"claimName": job.options.logs_pvc}}
        if job.options.logs_pvc
        else {"name": RUNS_VOLUME, "emptyDir": {}}  # lives as long as the pod: restarts in place only
    )
    return [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}, runs]


def container(job: PodJob, *, name: str, env: list[Manifest], port_name: str = "rendezvous") -> Manifest:
    found: Manifest = {
        "name": name,
        "image": job.options.image,
        "command": list(job.command),
        "env": env,
        "ports": [{"name": port_name, "containerPort": RENDEZVOUS_PORT}],
        "volumeMounts": volume_mounts(),
    }
    if resources(job):
        found["resources"] = resources(job)
    return found


def pod_template(job: PodJob, container_manifest: Manifest, *, subdomain: str | None = None) -> Manifest:
    """The pod template of Job, JobSet and PyTorchJob (TrainJob patches its runtime's instead)."""
    spec: Manifest = {
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "containers": [container_manifest],
        "volumes": volumes(job),
    }
    if subdomain is not None:
        spec["subdomain"] = subdomain
    return {"metadata": {"labels": labels(job)}, "spec": spec}
