"""Kubernetes: take the node layout from what the pod's controller injects.

A pod written by ``islab-train k8s`` runs one ``islab-train`` (one node of the job), which reads
its place in the job from the environment, as :mod:`islab.resolve.slurm` reads srun's:

Kubeflow Trainer's ``TrainJob`` (torch-distributed runtime) and training-operator's ``PyTorchJob``
inject torchrun's own ``PET_*`` variables:

=======================  =====================================================================
``PET_NNODES``           ``nnodes``: TrainJob ``numNodes`` (kubeflow/trainer
                         pkg/runtime/framework/plugins/torch/torch.go, ``EnforceMLPolicy``);
                         PyTorchJob: the replicas, or ``MIN:MAX`` of its ``elasticPolicy``
                         (kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go, elastic.go)
``PET_NODE_RANK``        ``node_rank``: TrainJob: the pod's Job completion index (torch.go);
                         PyTorchJob: 0 for the Master, 1+i for Worker i (envvar.go)
``PET_MASTER_ADDR``      node 0's address: TrainJob ``<name>-node-0-0.<name>`` (torch.go);
                         PyTorchJob ``<name>-master-0`` (pkg/controller.v1/pytorch/master.go)
``PET_MASTER_PORT``      the port: TrainJob 29500 (pkg/constants/constants.go); PyTorchJob: the
                         container port named ``pytorchjob-port`` (master.go)
``PET_NPROC_PER_NODE``   ``nproc_per_node`` (TrainJob ``numProcPerNode``, PyTorchJob ``nprocPerNode``)
``PET_RDZV_ENDPOINT``    elastic PyTorchJob only: the c10d endpoint ``<name>-worker-0:<port>``,
``PET_RDZV_BACKEND``     ``c10d``, and ``PET_RDZV_ID`` when set (elastic.go)
=======================  =====================================================================

A plain Indexed ``Job`` and a ``JobSet`` inject no training variables. The Job controller gives
every pod ``JOB_COMPLETION_INDEX`` (kubernetes pkg/controller/job/indexed_job_utils.go, KEP-2214)
-- the ``node_rank`` -- and the host name ``<job>-<index>``, reachable as ``<job>-<index>.<subdomain>``
through the headless Service our manifest creates. JobSet runs Indexed Jobs too, names pods
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>``, creates the headless Service ``<jobset>``
and, with ``spec.coordinator``, annotates every pod with pod 0's DNS name
``jobset.sigs.k8s.io/coordinator`` (kubernetes-sigs/jobset pkg/controllers/jobset_controller.go,
``CoordinatorEndpoint``), which our manifest passes in as ``ISLAB_K8S_MASTER_ADDR`` through the
downward API. The number of pods, which neither controller injects, comes from our manifest
(``ISLAB_K8S_NNODES``); the port is :data:`~islab.k8s.names.RENDEZVOUS_PORT`.

Precedence, as for SLURM: **command line > allocation > ISLAB_* environment > cluster file >
defaults**. Kubernetes mode is on with ``--k8s``, by itself in a pod our manifests wrote
(``ISLAB_K8S_FORMAT``) or one a Kubeflow controller started (``PET_NNODES`` and the kubelet's
``KUBERNETES_SERVICE_HOST``), and off with ``--no-k8s``. Everything here is a pure function of
the environment mapping passed in (:mod:`islab.k8s.dns` waits for node 0's name, at the edge).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from islab.k8s.names import FORMAT_VARIABLE, FORMATS, JOB_VARIABLE, MASTER_VARIABLE, NNODES_VARIABLE, RENDEZVOUS_PORT
from islab.resolve.job import JobIdentity
from islab.resolve.layers import Provided
from islab.resolve.slurm import launcher_chosen, rendezvous_layer
from islab.spec.addresses import split_host_port
from islab.spec.issues import Issue, SpecError

# Which controller's variables a format's pods carry.
TORCH_VARIABLES = ("trainjob", "pytorchjob")
CONTROLLERS = {
    "trainjob": "Kubeflow Trainer (TrainJob)",
    "pytorchjob": "Kubeflow training-operator (PyTorchJob)",
    "jobset": "JobSet",
    "job": "the Job controller (Indexed Job)",
}


def in_kubernetes_pod(environ: Mapping[str, str]) -> bool:
    """Is this a pod where Kubernetes mode switches on by itself? One our manifest wrote, or one
    a Kubeflow controller started (the kubelet sets KUBERNETES_SERVICE_HOST in every pod)."""
    return FORMAT_VARIABLE in environ or ("PET_NNODES" in environ and "KUBERNETES_SERVICE_HOST" in environ)


def job_run_leaf(job: str) -> str:
    """The run directory's last part of the Kubernetes job ``job``: the same for every pod and every
    restart (``islab-train k8s`` names it for the manifests, each pod for itself)."""
    return f"k8s-{job}"


@dataclass(frozen=True)
class KubernetesAllocation:
    """This pod's place in a Kubernetes training job."""

    format: str
    job: str  # the job's name: the run directory is k8s-<job>
    nnodes: int | str  # "MIN:MAX" for an elastic PyTorchJob
    node_rank: int | None  # None: elastic, torchrun's c10d rendezvous assigns it
    master_host: str
    port: int
    origins: Mapping[str, str]  # field -> the variable(s) it came from, for the dry run
    rendezvous_id: str | None = None
    nproc_per_node: int | None = None

    @property
    def run_leaf(self) -> str:
        """The run directory's last part: the same for every pod and every restart of the job."""
        return job_run_leaf(self.job)

    @property
    def identity(self) -> JobIdentity:
        """The job: its run directory ``k8s-<job>``; Kubernetes says nothing about restarts, so every
        start of a pod continues the job's own checkpoint when there is one; node 0's DNS name
        appears only once its pod runs."""
        return JobIdentity("k8s", self.run_leaf, restart=f"Kubernetes job {self.job} started again", waits_for_dns=True)

    def layer(self, chosen: Mapping[str, Any]) -> dict[str, Provided]:
        """The allocation as a spec layer; ``chosen`` holds what the other layers set, because the
        rendezvous lands in a different field per launcher (as in :meth:`islab.resolve.slurm.Allocation.layer`)."""
        origin = self.origins
        layer = {"nnodes": Provided(self.nnodes, origin["nnodes"])}
        if self.node_rank is not None:
            layer["node_rank"] = Provided(self.node_rank, origin["node_rank"])
        if self.nproc_per_node is not None:
            layer["nproc_per_node"] = Provided(self.nproc_per_node, origin["nproc_per_node"])
        elastic = isinstance(self.nnodes, str)
        if elastic and launcher_chosen(chosen) != "skrl-jax":  # only torchrun's c10d rendezvous takes a node range
            layer["rendezvous.backend"] = Provided("c10d", origin.get("backend", origin["nnodes"]))
            chosen = {**chosen, "rendezvous.backend": "c10d"}
        rendezvous_id = Provided(self.rendezvous_id or self.run_leaf, origin.get("id", JOB_VARIABLE))
        return layer | rendezvous_layer(chosen, Provided(self.master_host, origin["master"]),
                                        Provided(self.port, origin["port"]), rendezvous_id)  # fmt: skip


def _refuse(variable: str, problem: str, fmt: str) -> SpecError:
    fix = (
        f"Run islab-train inside a pod of the manifest 'islab-train k8s --format {fmt}' writes "
        f"(started by {CONTROLLERS.get(fmt, 'its controller')}), or drop --k8s"
    )
    return SpecError(Issue(variable, f"{problem} (needed to run inside a Kubernetes job)", fix))


def _count(environ: Mapping[str, str], name: str, fmt: str, *, allow_range: bool = False) -> int | str:
    text = environ.get(name, "").strip()
    if text.isdigit():
        return int(text)
    low, _, high = text.partition(":")
    if allow_range and low.isdigit() and high.isdigit():
        return text
    raise _refuse(name, "is not set" if not text else f"is {text!r}, not a whole number", fmt)


def _host(environ: Mapping[str, str], name: str, fmt: str) -> str:
    text = environ.get(name, "").strip()
    if not text or any(ch.isspace() for ch in text):
        raise _refuse(name, "is not set" if not text else f"is {text!r}, not a host name", fmt)
    return text


def _format_of(environ: Mapping[str, str]) -> str:
    fmt = environ.get(FORMAT_VARIABLE, "").strip()
    if not fmt:  # a Kubeflow controller's pod, not one of our manifests: PyTorchJob also sets WORLD_SIZE
        return "pytorchjob" if "WORLD_SIZE" in environ or "PET_RDZV_ENDPOINT" in environ else "trainjob"
    if fmt not in FORMATS:
        raise SpecError(Issue(FORMAT_VARIABLE, f"is {fmt!r}, not one of {', '.join(FORMATS)}",
                              "Write the manifest again with islab-train k8s"))  # fmt: skip
    return fmt


def allocation_from_environ(environ: Mapping[str, str]) -> KubernetesAllocation:
    """Read this pod's place from its controller's variables; SpecError names a missing or odd one."""
    fmt = _format_of(environ)
    if fmt in TORCH_VARIABLES:
        return _from_torch_variables(environ, fmt)
    node_rank = _count(environ, "JOB_COMPLETION_INDEX", fmt)
    nnodes = _count(environ, NNODES_VARIABLE, fmt)
    master = _host(environ, MASTER_VARIABLE, fmt)
    master_origin = (f"{MASTER_VARIABLE} (the jobset.sigs.k8s.io/coordinator annotation)" if fmt == "jobset"
                     else f"{MASTER_VARIABLE} (pod 0 behind the headless Service)")  # fmt: skip
    origins = {"nnodes": NNODES_VARIABLE, "node_rank": "JOB_COMPLETION_INDEX", "master": master_origin,
               "port": f"the manifest's port {RENDEZVOUS_PORT}"}  # fmt: skip
    job = environ.get(JOB_VARIABLE, "").strip() or master.split(".")[0]
    return KubernetesAllocation(fmt, job, nnodes, int(node_rank), master, RENDEZVOUS_PORT, origins)


def _from_torch_variables(environ: Mapping[str, str], fmt: str) -> KubernetesAllocation:
    nnodes = _count(environ, "PET_NNODES", fmt, allow_range=fmt == "pytorchjob")
    nproc = environ.get("PET_NPROC_PER_NODE", "").strip()
    origins = {"nnodes": "PET_NNODES", "nproc_per_node": "PET_NPROC_PER_NODE"}
    if isinstance(nnodes, str):  # elastic PyTorchJob: torchrun's c10d rendezvous numbers the nodes
        endpoint = _host(environ, "PET_RDZV_ENDPOINT", fmt)
        try:
            host, port = split_host_port(endpoint)
        except ValueError:
            raise _refuse("PET_RDZV_ENDPOINT", f"is {endpoint!r}, not host:port", fmt) from None
        origins |= {"master": "PET_RDZV_ENDPOINT", "port": "PET_RDZV_ENDPOINT", "backend": "PET_RDZV_BACKEND"}
        rdzv_id = environ.get("PET_RDZV_ID", "").strip() or None
        if rdzv_id:
            origins["id"] = "PET_RDZV_ID"
        job = environ.get(JOB_VARIABLE, "").strip() or host.split(".")[0].removesuffix("-worker-0")
        return KubernetesAllocation(fmt, job, nnodes, None, host, int(port), origins, rdzv_id,
                                    int(nproc) if nproc.isdigit() else None)  # fmt: skip
    node_rank = _count(environ, "PET_NODE_RANK", fmt)
    master = _host(environ, "PET_MASTER_ADDR", fmt)
    port = _count(environ, "PET_MASTER_PORT", fmt)
    origins |= {"node_rank": "PET_NODE_RANK", "master": "PET_MASTER_ADDR", "port": "PET_MASTER_PORT"}
    job = environ.get(JOB_VARIABLE, "").strip() or master.split(".")[0].rsplit("-", 2)[0]
    return KubernetesAllocation(fmt, job, nnodes, int(node_rank), master, int(port), origins, None,
                                int(nproc) if nproc.isdigit() else None)  # fmt: skip


__all__ = ["KubernetesAllocation", "allocation_from_environ", "in_kubernetes_pod"]
