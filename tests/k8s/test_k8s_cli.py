"""`islab-train k8s` on the command line, and the Kubernetes allocation inside a pod (fast, no cluster).

Bad input is one line per problem on stderr naming the option and the fix, exit code 2, nothing on
stdout (so `| kubectl apply -f -` applies nothing). Inside a pod, each format's injected variables
become the spec's node layout, below the command line and above ISLAB_* and the cluster file, and
the dry run names the variable each value came from.
"""

from __future__ import annotations

import re

import pytest
import yaml
from paths import REPO

from islab.k8s.allocation import allocation_from_environ, in_kubernetes_pod
from islab.k8s.dns import wait_for_dns
from islab.spec.issues import SpecError

IMAGE = ["--image", "ghcr.io/example/islab-train:0.1"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--format", "helm", *IMAGE], "--format"),
        (["--format", "trainjbo", *IMAGE], "--format"),
        ([], "--image"),
        (["--image", "two words"], "--image"),
        (["--name", "Cartpole_2x4", *IMAGE], "--name"),
        (["--name", "-leading-dash", *IMAGE], "--name"),
        (["--name", "x" * 60, "--nnodes", "2", *IMAGE], "--name"),  # x...x-node-0-1: 69 characters
        (["--namespace", "Research", *IMAGE], "--namespace"),
        (["--logs-pvc", "runs/claim", *IMAGE], "--logs-pvc"),
        (["--runtime", "Torch Distributed", *IMAGE], "--runtime"),
        (["--secret", "MY_SECRETS", *IMAGE], "--secret"),
        (["--cpu", "eight", *IMAGE], "--cpu"),
        (["--memory", "32 GB", *IMAGE], "--memory"),
        (["--gpus", "4", "--gpus-per-pod", "2", *IMAGE], "--gpus-per-pod"),
        (["--device", "cpu", "--nproc", "2", "--gpus-per-pod", "1", *IMAGE], "--gpus-per-pod"),
        (["--nnodes", "1:2", "--format", "trainjob", *IMAGE], "--nnodes"),
        (["--nnodes", "1:2", "--format", "jobset", *IMAGE], "--nnodes"),
        (["--nnodes", "1:2", "--format", "job", *IMAGE], "--nnodes"),
        (["--lib", "torch", *IMAGE], "--lib"),
    ],
)
def test_bad_input_exits_2_with_nothing_on_stdout(islab, args, field):
    code, out, err = islab("k8s", *args)
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    assert any(line.startswith(f"error: {field}") for line in lines), err


def test_elastic_is_refused_naming_the_format_that_has_it(islab):
    code, out, err = islab("k8s", "--nnodes", "1:2", *IMAGE)
    assert code == 2 and out == ""
    assert "--format pytorchjob" in err and "elastic" in err


def test_the_pods_get_the_flattened_spec_and_the_secrets_by_reference(islab, tmp_path):
    """Command line, ISLAB_* and cluster file reach the pod as options; node layout and log dir do not."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "lib": "rl_games", "nnodes": 2, "nproc_per_node": 2, "device": "cpu", "num_envs": 128, "seed": 7,
        "log_dir": "/somewhere/local", "rendezvous": {"backend": "c10d", "timeout_s": 90},
        "env": {"HF_TOKEN": "hf_do_not_print", "OMP_NUM_THREADS": "2"},
    }))  # fmt: skip
    code, out, err = islab("k8s", "--format", "job", "--cluster", str(cluster), "--max-iterations", "5",
                           "--name", "rlg", *IMAGE, "params.config.minibatch_size=64")  # fmt: skip
    assert code == 0, err
    assert "hf_do_not_print" not in out + err
    _, job = [doc for doc in yaml.safe_load_all(out) if doc]
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["python", "-m", "islab.cli"]
    text = " ".join(command)
    expected = ["--lib rl_games", "--nproc 2", "--device cpu", "--num-envs 128", "--seed 7", "--rdzv-backend c10d",
                "--rdzv-timeout 90", "--max-iterations 5", "--log-dir /islab/runs"]  # fmt: skip
    for option in expected:
        assert option in text, text
    assert command[-1] == "params.config.minibatch_size=64"
    assert "--nnodes" not in command and "--cluster" not in command and "/somewhere/local" not in text
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["OMP_NUM_THREADS"] == {"name": "OMP_NUM_THREADS", "value": "2"}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "islab-train-secrets", "key": "HF_TOKEN"}
    assert "kubectl create secret generic islab-train-secrets --from-literal=HF_TOKEN=..." in out


def test_dash_o_writes_the_file(islab, tmp_path):
    target = tmp_path / "job.yaml"
    code, out, err = islab("k8s", "--format", "jobset", "--device", "cpu", "-o", str(target), *IMAGE)
    assert code == 0 and out == "", err
    assert [doc["kind"] for doc in yaml.safe_load_all(target.read_text()) if doc] == ["JobSet"]


# ----------------------------------------------------------------------------------------------
# Inside a pod
# ----------------------------------------------------------------------------------------------

KUBELET = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOSTNAME": "pod"}
POD_ENV = {
    "trainjob": {"ISLAB_K8S_FORMAT": "trainjob", "ISLAB_K8S_JOB": "tj", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
                 "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "tj-node-0-0.tj", "PET_MASTER_PORT": "29500",
                 "JOB_COMPLETION_INDEX": "1"},
    "pytorchjob": {"ISLAB_K8S_FORMAT": "pytorchjob", "ISLAB_K8S_JOB": "pj", "PET_NNODES": "2", "PET_NODE_RANK": "1",
                   "PET_NPROC_PER_NODE": "1", "MASTER_ADDR": "pj-master-0", "PET_MASTER_ADDR": "pj-master-0",
                   "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1"},
    "jobset": {"ISLAB_K8S_FORMAT": "jobset", "ISLAB_K8S_JOB": "js", "ISLAB_K8S_NNODES": "2",
               "ISLAB_K8S_MASTER_ADDR": "js-node-0-0.js", "JOB_COMPLETION_INDEX": "1"},
    "job": {"ISLAB_K8S_FORMAT": "job", "ISLAB_K8S_JOB": "jb", "ISLAB_K8S_NNODES": "2",
            "ISLAB_K8S_MASTER_ADDR": "jb-0.jb", "JOB_COMPLETION_INDEX": "1"},
}  # fmt: skip
MASTERS = {"trainjob": ("tj-node-0-0.tj", 29500), "pytorchjob": ("pj-master-0", 23456),
           "jobset": ("js-node-0-0.js", 29500), "job": ("jb-0.jb", 29500)}  # fmt: skip


@pytest.mark.parametrize("fmt", list(POD_ENV))
def test_each_format_s_variables_give_the_node_layout(fmt):
    environ = {**KUBELET, **POD_ENV[fmt]}
    assert in_kubernetes_pod(environ)
    allocation = allocation_from_environ(environ)
    layer = allocation.layer({})
    assert (layer["nnodes"].value, layer["node_rank"].value) == (2, 1)
    master, port = MASTERS[fmt]
    assert (layer["rendezvous.master_addr"].value, layer["rendezvous.master_port"].value) == (master, port)
    assert allocation.run_leaf == f"k8s-{POD_ENV[fmt]['ISLAB_K8S_JOB']}"
    c10d = allocation.layer({"rendezvous.backend": "c10d"})
    assert c10d["rendezvous.endpoint"].value == f"{master}:{port}" and "node_rank" in c10d
    jax = allocation.layer({"lib": "skrl", "ml_framework": "jax"})
    assert jax["coordinator_address"].value == f"{master}:{port}"


def test_an_elastic_pytorchjob_meets_at_its_c10d_endpoint():
    environ = {**KUBELET, "ISLAB_K8S_FORMAT": "pytorchjob", "ISLAB_K8S_JOB": "el", "PET_NNODES": "1:2",
               "PET_RDZV_ENDPOINT": "el-worker-0:23456", "PET_RDZV_BACKEND": "c10d"}  # fmt: skip
    layer = allocation_from_environ(environ).layer({})
    assert layer["nnodes"].value == "1:2" and "node_rank" not in layer
    assert layer["rendezvous.backend"].value == "c10d"
    assert layer["rendezvous.endpoint"].value == "el-worker-0:23456"
    assert layer["rendezvous.id"].value == "k8s-el"


@pytest.mark.parametrize(
    "fmt, missing",
    [("trainjob", "PET_NODE_RANK"), ("pytorchjob", "PET_MASTER_ADDR"), ("jobset", "ISLAB_K8S_MASTER_ADDR"),
     ("job", "JOB_COMPLETION_INDEX")],
)  # fmt: skip
def test_a_missing_variable_is_named(fmt, missing):
    environ = {key: value for key, value in {**KUBELET, **POD_ENV[fmt]}.items() if key != missing}
    with pytest.raises(SpecError) as caught:
        allocation_from_environ(environ)
    (issue,) = caught.value.issues
    assert issue.field == missing and "islab-train k8s --format" in issue.fix


def test_a_pod_waits_for_node_0_s_dns_name(capsys):
    """Pod 0's name appears in the cluster DNS seconds after the pod: wait, do not fail the pre-launch check."""
    now = [0.0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    answers = iter([((), "Name or service not known")] * 3 + [(("10.0.0.5",), None)])
    assert wait_for_dns("job-0.job", 60, resolve=lambda host: next(answers), sleep=advance, clock=lambda: now[0])
    assert now[0] == 3.0 and "waiting for node 0's name job-0.job" in capsys.readouterr().err
    never = wait_for_dns("gone", 5, resolve=lambda host: ((), "no"), sleep=advance, clock=lambda: now[0])
    assert never is False


def test_a_plain_workstation_is_not_a_pod():
    assert not in_kubernetes_pod({"PET_NNODES": "2"})  # torchrun's own variables outside Kubernetes
    assert not in_kubernetes_pod({"KUBERNETES_SERVICE_HOST": "10.96.0.1"})  # a pod, but no training job


def test_dry_run_inside_a_pod_shows_the_allocation(islab, monkeypatch):
    for name, value in {**KUBELET, **POD_ENV["trainjob"]}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ISLAB_NNODES", "5")  # ISLAB_* is below the allocation
    code, out, err = islab("--device", "cpu", "--dry-run")
    assert code == 0, err
    assert re.search(r"nnodes += 2 +\(source: k8s, PET_NNODES\)", out), out
    assert re.search(r"node_rank += 1 +\(source: k8s, PET_NODE_RANK\)", out), out
    assert "--master_addr tj-node-0-0.tj --master_port 29500" in out
    assert "/k8s-tj" in out  # the run directory every restart of the job finds again
    code, out, _ = islab("--device", "cpu", "--node-rank", "0", "--dry-run")  # the command line still wins
    assert code == 0 and re.search(r"node_rank += 0 +\(source: cli", out), out
    monkeypatch.delenv("ISLAB_NNODES")
    code, out, _ = islab("--device", "cpu", "--no-k8s", "--dry-run")
    assert code == 0 and "/k8s-tj" not in out and re.search(r"nnodes += 1 +\(source: default", out), out


# ----------------------------------------------------------------------------------------------
# docs/KUBERNETES.md: its manifests are what the command writes
# ----------------------------------------------------------------------------------------------


def test_the_docs_manifests_are_what_the_command_writes(islab):
    text = (REPO / "docs" / "KUBERNETES.md").read_text()
    command = re.search(r"^    (islab-train k8s --format trainjob .*--name cartpole-2x4)$", text, re.M).group(1)
    blocks = dict(re.findall(r"### `--format (\w+)`\n\n```yaml\n(.*?)```", text, re.S))
    assert sorted(blocks) == ["job", "jobset", "pytorchjob", "trainjob"]
    for fmt, block in blocks.items():
        code, out, err = islab(*command.replace("--format trainjob", f"--format {fmt}").split()[1:])
        assert code == 0, err
        assert out == block, f"docs/KUBERNETES.md's {fmt} manifest is out of date: regenerate it with the command"
