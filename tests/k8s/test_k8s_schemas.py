"""Every format `islab-train k8s` writes, validated offline against the real schemas.

* TrainJob: Kubeflow Trainer's own pydantic models (``kubeflow-trainer-api``), and
* PyTorchJob: training-operator's own openapi models (``kubeflow-training``), deserialised by
  its own ApiClient. Both silently DROP unknown fields, so the model's dump must also equal the
  manifest: a misspelled field anywhere (the pod template included) fails;
* Job and Service: ``kubernetes-validate --strict`` (Kubernetes' own OpenAPI schemas; strict:
  unknown fields fail);
* JobSet: the openAPIV3Schema of JobSet's released CRD (tests/fixtures/k8s/jobset, v0.12.0) with
  ``jsonschema``; unknown fields are refused, as ``kubectl apply``'s default strict field
  validation does (CRD schemas leave that to the API server).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import FIXTURES

from islab.cli import run

FIXTURES = FIXTURES / "k8s"
IMAGE = "ghcr.io/example/islab-train:0.1"
# A 2-node x 4-GPU rsl_rl job with a secret and a plain env value, requests and a claim.
CLUSTER_YAML = """\
lib: rsl_rl
nnodes: 2
nproc_per_node: 4
device: cuda
env:
  WANDB_API_KEY: do-not-print-me
  NCCL_DEBUG: WARN
"""


def manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    code = run(["k8s", "--cluster", str(cluster), "--image", IMAGE, "--name", "cartpole", "--logs-pvc", "runs",
                "--cpu", "16", "--memory", "64Gi", *args])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "do-not-print-me" not in out
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _plain(value: Any) -> Any:
    """Quantities come back as floats (trainer models) or strings (training models): compare them as text."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def trainjob_dump(manifest: dict[str, Any]) -> dict[str, Any]:
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    return TrainerV1alpha1TrainJob.from_dict(manifest).to_dict()


def pytorchjob_dump(manifest: dict[str, Any]) -> dict[str, Any]:
    from kubeflow.training.api_client import ApiClient

    client = ApiClient()
    model = client._ApiClient__deserialize(manifest, "KubeflowOrgV1PyTorchJob")  # its own deserialiser
    return client.sanitize_for_serialization(model)


def kubernetes_validate(tmp_path: Path, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent)) or "kubernetes-validate"
    return subprocess.run([tool, "--strict", str(path)], capture_output=True, text=True, timeout=120)


def closed(schema: Any) -> Any:
    """The CRD schema with unknown fields refused wherever it lists the fields (and does not say
    x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    found = {key: closed(value) for key, value in schema.items()}
    lists_fields = "properties" in found and "additionalProperties" not in found
    if lists_fields and not found.get("x-kubernetes-preserve-unknown-fields"):
        found["additionalProperties"] = False
    return found


def jobset_errors(manifest: dict[str, Any]) -> list[str]:
    import jsonschema

    schema = closed(json.loads((FIXTURES / "jobset" / "jobset-v1alpha2-openapiv3.json").read_text()))
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(manifest)]


@pytest.mark.needs("kubeflow_trainer_api")
def test_trainjob_matches_kubeflow_trainer_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = manifests(tmp_path, capsys)
    assert job["kind"] == "TrainJob" and job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert _plain(trainjob_dump(job)) == _plain(job)
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 4)
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 4}
    secret = next(entry for entry in trainer["env"] if entry["name"] == "WANDB_API_KEY")
    assert secret == {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "islab-train-secrets",
                                                                               "key": "WANDB_API_KEY"}}}  # fmt: skip


@pytest.mark.needs("kubeflow_trainer_api")
def test_a_misspelled_trainjob_field_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = manifests(tmp_path, capsys)
    job["spec"]["trainer"]["numNode"] = job["spec"]["trainer"].pop("numNodes")
    assert _plain(trainjob_dump(job)) != _plain(job)
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod["template"]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medum"] = "Memory"
    assert _plain(trainjob_dump(job)) != _plain(job)


@pytest.mark.needs("kubeflow.training")
@pytest.mark.parametrize("elastic", [False, True], ids=["static", "elastic"])
def test_pytorchjob_matches_training_operator_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], elastic: bool
) -> None:
    (job,) = manifests(tmp_path, capsys, "--format", "pytorchjob", *(["--nnodes", "1:2"] if elastic else []))
    assert job["kind"] == "PyTorchJob" and job["apiVersion"] == "kubeflow.org/v1"
    assert _plain(pytorchjob_dump(job)) == _plain(job)
    replicas = job["spec"]["pytorchReplicaSpecs"]
    if elastic:
        assert job["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 2, "rdzvBackend": "c10d"}
        assert list(replicas) == ["Worker"] and replicas["Worker"]["replicas"] == 2
    else:
        assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["ports"][0]["name"] == "pytorchjob-port"


@pytest.mark.needs("kubeflow.training")
def test_a_misspelled_pytorchjob_field_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = manifests(tmp_path, capsys, "--format", "pytorchjob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["terminationGracePeriodSecond"] = pod.pop("terminationGracePeriodSeconds")
    assert _plain(pytorchjob_dump(job)) != _plain(job)


@pytest.mark.needs("kubernetes_validate")
def test_job_and_service_pass_kubernetes_validate_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    service, job = manifests(tmp_path, capsys, "--format", "job")
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    result = kubernetes_validate(tmp_path, [service, job])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == 2, result.stdout
    assert service["spec"]["clusterIP"] == "None"
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2


@pytest.mark.needs("kubernetes_validate")
def test_a_misspelled_job_field_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    service, job = manifests(tmp_path, capsys, "--format", "job")
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = [{"name": "runs", "mountPath": "/x"}]
    result = kubernetes_validate(tmp_path, [service, job])
    assert result.returncode != 0 and "volumeMount" in result.stdout + result.stderr


@pytest.mark.needs("jsonschema")
def test_jobset_matches_the_released_crd_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (jobset,) = manifests(tmp_path, capsys, "--format", "jobset")
    assert jobset["kind"] == "JobSet" and jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset_errors(jobset) == []
    assert jobset["spec"]["coordinator"] == {"replicatedJob": "node", "jobIndex": 0, "podIndex": 0}


@pytest.mark.needs("jsonschema")
def test_a_misspelled_jobset_field_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (jobset,) = manifests(tmp_path, capsys, "--format", "jobset")
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMod"] = "Indexed"
    assert any("completionMod" in error for error in jobset_errors(jobset))


@pytest.mark.parametrize("fmt", ["trainjob", "pytorchjob", "jobset", "job"])
def test_every_pod_has_what_users_expect(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """GPU limits = ranks per node, /dev/shm in memory, a grace period above ours, the run directory on
    the claim, labels naming the run, secrets by reference only."""
    from islab.spec.stopping import PREEMPT_GRACE_S

    docs = manifests(tmp_path, capsys, "--format", fmt)
    text = yaml.safe_dump_all(docs)
    assert "do-not-print-me" not in text
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "cartpole"
    pod = _pod_spec(docs[-1], fmt)
    assert pod["terminationGracePeriodSeconds"] > PREEMPT_GRACE_S
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": "runs"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in mounts
    assert {"name": "runs", "mountPath": "/islab/runs"} in mounts
    if fmt != "trainjob":  # TrainJob: trainer.resourcesPerNode (checked above)
        assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}


def test_cpu_ranks_ask_for_no_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("trainjob", "pytorchjob", "jobset", "job"):
        docs = manifests(tmp_path, capsys, "--format", fmt, "--device", "cpu", "--nproc", "2")
        assert "nvidia.com/gpu" not in yaml.safe_dump_all(docs)


def _pod_spec(doc: dict[str, Any], fmt: str) -> dict[str, Any]:
    spec = doc["spec"]
    if fmt == "trainjob":
        patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        return patch["template"]["spec"]["template"]["spec"]
    if fmt == "pytorchjob":
        return spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    if fmt == "jobset":
        return spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return spec["template"]["spec"]
