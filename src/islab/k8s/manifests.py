"""The manifests of ``islab-train k8s``: the pod of :mod:`islab.k8s.pod` in each controller's wrapper.

=============  ==============================  ====================================================
format         object(s)                       needs installed
=============  ==============================  ====================================================
``trainjob``   TrainJob trainer.kubeflow.org/  Kubeflow Trainer v2.3+ (``runtimePatches`` with the
               v1alpha1                        grace period) and its ``torch-distributed`` runtime
``pytorchjob`` PyTorchJob kubeflow.org/v1      Kubeflow training-operator v1
``jobset``     JobSet jobset.x-k8s.io/v1alpha2 JobSet
``job``        Service v1 (headless) +         nothing: Kubernetes itself (Indexed Jobs, 1.24+)
               Job batch/v1 (Indexed)
=============  ==============================  ====================================================

Elastic membership (``nnodes: "1:2"``) exists only in PyTorchJob (``elasticPolicy``); the others
run a fixed number of pods (Kubeflow Trainer's torch plugin: "TODO: Add support for PyTorch
elastic when JobSet supports Elastic Jobs"), so :func:`elastic_issue` refuses it for them.
Pure functions: a :class:`~islab.k8s.pod.PodJob` in, a list of manifest dicts out;
:func:`render` writes them as one multi-document YAML stream.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from islab.k8s.names import FORMATS, MASTER_VARIABLE, NNODES_VARIABLE, PYTORCHJOB_PORT_NAME, RENDEZVOUS_PORT
from islab.k8s.pod import (
    RESTARTS_PER_POD,
    TERMINATION_GRACE_S,
    Manifest,
    PodJob,
    container,
    job_env,
    labels,
    metadata,
    pod_template,
    resources,
    volume_mounts,
    volumes,
)
from islab.spec.issues import Issue

# The replicated Job and container the torch-distributed runtime defines (kubeflow/trainer
# manifests/base/runtimes/torch_distributed.yaml; pkg/constants/constants.go: Node = "node").
NODE = "node"
# PyTorchJob's controller finds the training container by this name (PyTorchJobDefaultContainerName).
PYTORCH_CONTAINER = "pytorch"
PATCH_MANAGER = "islab-train"
# JobSet's annotation holding pod 0's DNS name once spec.coordinator is set (jobset_types.go: CoordinatorKey).
JOBSET_COORDINATOR_KEY = "jobset.sigs.k8s.io/coordinator"
ELASTIC_FORMATS = ("pytorchjob",)


def elastic_issue(fmt: str, job: PodJob) -> Issue | None:
    if job.min_nnodes is None or fmt in ELASTIC_FORMATS:
        return None
    return Issue(
        "--nnodes", f"{job.min_nnodes}:{job.nnodes} asks for elastic membership, which a {fmt} cannot express "
        "(it runs a fixed number of pods)",
        f"Use --format pytorchjob (its elasticPolicy maps MIN:MAX), or a fixed --nnodes {job.nnodes}",
    )  # fmt: skip


def trainjob(job: PodJob) -> list[Manifest]:
    """Kubeflow Trainer v2: the trainer's image/command/env/resources, and a runtime patch for
    what the TrainJob itself cannot say (volumes, mounts, the grace period, labels)."""
    trainer: Manifest = {
        "image": job.options.image,
        "command": list(job.command),
        "env": job_env(job, "trainjob"),
        "numNodes": job.nnodes,
        "numProcPerNode": job.nproc_per_node,
    }
    if resources(job):
        trainer["resourcesPerNode"] = resources(job)
    pod_patch = {
        "metadata": {"labels": labels(job)},
        "spec": {
            "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
            "volumes": volumes(job),
            "containers": [{"name": NODE, "volumeMounts": volume_mounts()}],
        },
    }
    replicated = {"name": NODE, "template": {"metadata": {"labels": labels(job)}, "spec": {"template": pod_patch}}}
    spec = {
        "runtimeRef": {"name": job.options.runtime},
        "trainer": trainer,
        "runtimePatches": [{
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}},
        }],
    }  # fmt: skip
    return [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": metadata(job),
             "spec": spec}]  # fmt: skip


def pytorchjob(job: PodJob) -> list[Manifest]:
    """training-operator v1: a Master and nnodes-1 Workers, or (elastic) MAX Workers under an elasticPolicy."""
    pod = pod_template(job, container(job, name=PYTORCH_CONTAINER, env=job_env(job, "pytorchjob"),
                                      port_name=PYTORCHJOB_PORT_NAME))  # fmt: skip

    def replicas(count: int) -> Manifest:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": pod}

    spec: Manifest = {
        "nprocPerNode": str(job.nproc_per_node),
        "runPolicy": {"backoffLimit": RESTARTS_PER_POD * job.nnodes, "cleanPodPolicy": "None"},
    }
    if job.min_nnodes is not None:
        # nprocPerNode above, not elasticPolicy.nProcPerNode: the webhook refuses both (pytorchjob_webhook.go)
        spec["elasticPolicy"] = {"minReplicas": job.min_nnodes, "maxReplicas": job.nnodes, "rdzvBackend": "c10d"}
        spec["pytorchReplicaSpecs"] = {"Worker": replicas(job.nnodes)}
    else:
        spec["pytorchReplicaSpecs"] = {"Master": replicas(1)}
        if job.nnodes > 1:
            spec["pytorchReplicaSpecs"]["Worker"] = replicas(job.nnodes - 1)
    return [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata(job), "spec": spec}]


def _indexed_job_spec(job: PodJob, pod: Manifest) -> Manifest:
    return {
        "completionMode": "Indexed",
        "completions": job.nnodes,
        "parallelism": job.nnodes,
        "backoffLimit": RESTARTS_PER_POD * job.nnodes,
        "template": pod,
    }


def jobset(job: PodJob) -> list[Manifest]:
    """JobSet: one replicated Indexed Job of nnodes pods; its coordinator annotation names pod 0."""
    coordinator = {
        "name": MASTER_VARIABLE,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOBSET_COORDINATOR_KEY}']"}},
    }
    env = job_env(job, "jobset", [{"name": NNODES_VARIABLE, "value": str(job.nnodes)}, coordinator])
    pod = pod_template(job, container(job, name=NODE, env=env))
    spec = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "coordinator": {"replicatedJob": NODE, "jobIndex": 0, "podIndex": 0},
        "failurePolicy": {"maxRestarts": RESTARTS_PER_POD},
        "replicatedJobs": [{
            "name": NODE, "replicas": 1,
            "template": {"metadata": {"labels": labels(job)}, "spec": _indexed_job_spec(job, pod)},
        }],
    }  # fmt: skip
    return [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata(job), "spec": spec}]


def job_master_host(name: str) -> str:
    """Pod 0 of the Indexed Job ``name``: host name ``<name>-0`` under the headless Service ``<name>``."""
    return f"{name}-0.{name}"


def job(job: PodJob) -> list[Manifest]:
    """No operator: a headless Service (pod DNS names) and an Indexed Job whose pods use it as subdomain."""
    name = job.options.name
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # pod 0's name resolves before any readiness
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
        },
    }
    env = job_env(job, "job", [{"name": NNODES_VARIABLE, "value": str(job.nnodes)},
                               {"name": MASTER_VARIABLE, "value": job_master_host(name)}])  # fmt: skip
    pod = pod_template(job, container(job, name=NODE, env=env), subdomain=name)
    batch = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(job), "spec": _indexed_job_spec(job, pod)}
    return [service, batch]


BUILDERS: dict[str, Callable[[PodJob], list[Manifest]]] = {
    "trainjob": trainjob,
    "pytorchjob": pytorchjob,
    "jobset": jobset,
    "job": job,
}
assert tuple(BUILDERS) == FORMATS


def master_host(fmt: str, name: str) -> str:
    """Pod 0's DNS name as each controller makes it (for the plan printed when the manifest is written)."""
    return {
        "trainjob": f"{name}-{NODE}-0-0.{name}",  # kubeflow/trainer torch.go: PET_MASTER_ADDR
        "pytorchjob": f"{name}-master-0",  # training-operator master.go: replicaName(name, Master, 0)
        "jobset": f"{name}-{NODE}-0-0.{name}",  # jobset_controller.go: CoordinatorEndpoint
        "job": job_master_host(name),
    }[fmt]


def build(fmt: str, pod_job: PodJob) -> list[Manifest]:
    return BUILDERS[fmt](pod_job)


def render(manifests: list[Manifest], header: str = "") -> str:
    """One YAML stream, ``---`` between documents, keys in the order written."""
    body = yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False, explicit_start=True)
    return header + body
