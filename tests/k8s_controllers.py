"""What each controller gives a pod of the manifests `islab-train k8s` writes (tests only).

A model of the controllers, written from their sources, for the pod simulation of
tests/k8s/test_k8s_pods.py: for every pod of a manifest, its host name, the DNS name other pods reach
it by, its container (command and env entries) and the variables/annotations its controller adds:

* TrainJob -- kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go (``EnforceMLPolicy``):
  PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the Job completion index), PET_MASTER_ADDR
  ``<name>-node-0-0.<name>``, PET_MASTER_PORT 29500; pods ``<name>-node-0-<i>`` (a JobSet, whose
  Indexed Job also sets JOB_COMPLETION_INDEX);
* PyTorchJob -- kubeflow/training-operator v1.9 pkg/controller.v1/pytorch/envvar.go and master.go:
  PYTHONUNBUFFERED, MASTER_ADDR/PET_MASTER_ADDR ``<name>-master-0``, MASTER_PORT/PET_MASTER_PORT
  (the port named pytorchjob-port), WORLD_SIZE (pods x nprocPerNode), RANK and PET_NODE_RANK
  (Master 0, Worker i -> i+1), PET_NPROC_PER_NODE, PET_NNODES; pods ``<name>-master-0`` and
  ``<name>-worker-<i>``, each with a Service of its name;
* JobSet -- kubernetes-sigs/jobset pkg/controllers/jobset_controller.go: pods
  ``<name>-<replicatedJob>-<jobIndex>-<podIndex>`` with subdomain ``spec.network.subdomain`` or
  ``<name>``, annotations jobset-name / replicatedjob-name / job-index and (``spec.coordinator``)
  ``jobset.sigs.k8s.io/coordinator``; its Indexed Jobs set JOB_COMPLETION_INDEX;
* Job -- Kubernetes' Job controller (KEP-2214): JOB_COMPLETION_INDEX and host name ``<name>-<i>``
  under the pod template's subdomain, which must be the headless Service of the manifest.

Every pod also gets what the kubelet sets in any pod: HOSTNAME and KUBERNETES_SERVICE_HOST/PORT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TRAINER_PORT = 29500  # kubeflow/trainer pkg/constants/constants.go: ContainerTrainerPort
KUBELET = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
_ANNOTATION = re.compile(r"metadata\.annotations\['([^']+)'\]")


@dataclass
class Pod:
    hostname: str
    dns_names: tuple[str, ...]  # how the other pods reach it
    container: dict[str, Any]
    injected: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)

    def env(self, secrets: dict[str, str]) -> dict[str, str]:
        """The container's environment: its env entries resolved as the kubelet does (values,
        the downward API, Secrets), then what the controller injected, then the kubelet's own."""
        env: dict[str, str] = {}
        for entry in self.container.get("env", []):
            if "value" in entry:
                env[entry["name"]] = entry["value"]
                continue
            source = entry["valueFrom"]
            if "secretKeyRef" in source:
                env[entry["name"]] = secrets[source["secretKeyRef"]["key"]]
            else:
                match = _ANNOTATION.fullmatch(source["fieldRef"]["fieldPath"])
                assert match, f"unsupported fieldRef {source}"
                env[entry["name"]] = self.annotations[match.group(1)]
        return {**env, **self.injected, **KUBELET, "HOSTNAME": self.hostname}


def pods_of(docs: list[dict[str, Any]]) -> list[Pod]:
    kinds = [doc["kind"] for doc in docs]
    if kinds == ["TrainJob"]:
        return _trainjob(docs[0])
    if kinds == ["PyTorchJob"]:
        return _pytorchjob(docs[0])
    if kinds == ["JobSet"]:
        return _jobset(docs[0])
    if kinds == ["Service", "Job"]:
        return _job(*docs)
    raise AssertionError(f"unknown manifest {kinds}")


def _trainjob(doc: dict[str, Any]) -> list[Pod]:
    name, trainer = doc["metadata"]["name"], doc["spec"]["trainer"]
    count = trainer["numNodes"]
    pods = []
    for index in range(count):
        injected = {
            "PET_NNODES": str(count),
            "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
            "PET_MASTER_PORT": str(TRAINER_PORT),
            "JOB_COMPLETION_INDEX": str(index),
        }
        hostname = f"{name}-node-0-{index}"
        container = {"command": trainer["command"], "env": trainer.get("env", [])}
        pods.append(Pod(hostname, (f"{hostname}.{name}", hostname), container, injected))
    return pods


def _pytorchjob(doc: dict[str, Any]) -> list[Pod]:
    name, spec = doc["metadata"]["name"], doc["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    if "elasticPolicy" in spec:
        return _elastic_pytorchjob(name, spec)
    total = sum(replica["replicas"] for replica in replicas.values())
    master = replicas["Master"]["template"]["spec"]["containers"][0]
    port = next(item["containerPort"] for item in master["ports"] if item["name"] == "pytorchjob-port")
    nproc = spec.get("nprocPerNode")
    pods = []
    roles = [("master", 0, replicas["Master"])] + [("worker", i, replicas["Worker"]) for i in
                                                  range(replicas.get("Worker", {}).get("replicas", 0))]  # fmt: skip
    for rank, (role, index, replica) in enumerate(roles):
        container = next(c for c in replica["template"]["spec"]["containers"] if c["name"] == "pytorch")
        injected = {
            "PYTHONUNBUFFERED": "1",
            "MASTER_PORT": str(port), "PET_MASTER_PORT": str(port),
            "MASTER_ADDR": f"{name}-master-0", "PET_MASTER_ADDR": f"{name}-master-0",
            "WORLD_SIZE": str(total * int(nproc or 1)), "RANK": str(rank), "PET_NODE_RANK": str(rank),
            "PET_NNODES": str(total),
        }  # fmt: skip
        if nproc is not None:
            injected["PET_NPROC_PER_NODE"] = nproc
        hostname = f"{name}-{role}-{index}"
        pods.append(Pod(hostname, (hostname,), container, injected))
    return pods


def _jobset(doc: dict[str, Any]) -> list[Pod]:
    name, spec = doc["metadata"]["name"], doc["spec"]
    subdomain = spec.get("network", {}).get("subdomain") or name
    coordinator = spec.get("coordinator")
    pods = []
    for rjob in spec["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        assert job_spec["completionMode"] == "Indexed"
        for job_index in range(rjob.get("replicas", 1)):
            for index in range(job_spec["completions"]):
                annotations = {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                }
                if coordinator:
                    annotations["jobset.sigs.k8s.io/coordinator"] = (
                        f"{name}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
                        f"{coordinator.get('podIndex', 0)}.{subdomain}"
                    )
                hostname = f"{name}-{rjob['name']}-{job_index}-{index}"
                container = job_spec["template"]["spec"]["containers"][0]
                pods.append(Pod(hostname, (f"{hostname}.{subdomain}", hostname), container,
                                {"JOB_COMPLETION_INDEX": str(index)}, annotations))  # fmt: skip
    return pods


def _job(service: dict[str, Any], job: dict[str, Any]) -> list[Pod]:
    name, spec = job["metadata"]["name"], job["spec"]
    pod_spec = spec["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert service["spec"]["clusterIP"] == "None" and pod_spec["subdomain"] == service["metadata"]["name"]
    selector = service["spec"]["selector"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items(), "the Service selects no pod"
    pods = []
    for index in range(spec["completions"]):
        hostname = f"{name}-{index}"
        pods.append(Pod(hostname, (f"{hostname}.{pod_spec['subdomain']}", hostname), pod_spec["containers"][0],
                        {"JOB_COMPLETION_INDEX": str(index)}))  # fmt: skip
    return pods


def _elastic_pytorchjob(name: str, spec: dict[str, Any]) -> list[Pod]:
    """Workers only (the webhook requires them), the c10d variables of elastic.go: PET_RDZV_ENDPOINT
    ``<name>-worker-0:<the worker's pytorchjob-port>``, PET_RDZV_BACKEND (default c10d), PET_NNODES
    ``MIN:MAX``, PET_NPROC_PER_NODE, PET_MAX_RESTARTS / PET_RDZV_ID when set; no MASTER_* without a Master."""
    policy, worker = spec["elasticPolicy"], spec["pytorchReplicaSpecs"]["Worker"]
    assert set(spec["pytorchReplicaSpecs"]) == {"Worker"}
    container = next(c for c in worker["template"]["spec"]["containers"] if c["name"] == "pytorch")
    port = next(item["containerPort"] for item in container["ports"] if item["name"] == "pytorchjob-port")
    injected = {
        "PYTHONUNBUFFERED": "1",
        "PET_RDZV_ENDPOINT": f"{policy.get('rdzvHost', f'{name}-worker-0')}:{policy.get('rdzvPort', port)}",
        "PET_RDZV_BACKEND": policy.get("rdzvBackend", "c10d"),
        "PET_NNODES": f"{policy['minReplicas']}:{policy['maxReplicas']}",
        "PET_NPROC_PER_NODE": spec["nprocPerNode"],
    }
    for key, variable in (("maxRestarts", "PET_MAX_RESTARTS"), ("rdzvId", "PET_RDZV_ID")):
        if key in policy:
            injected[variable] = str(policy[key])
    return [Pod(f"{name}-worker-{index}", (f"{name}-worker-{index}",), container, dict(injected))
            for index in range(worker["replicas"])]  # fmt: skip
