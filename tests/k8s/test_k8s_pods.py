"""The pods of `islab-train k8s` manifests, simulated in two network namespaces, train to the end.

No cluster can run here, so each format's pods are played as its controller and the kubelet would
run them (tests/k8s_controllers.py): every "pod" is a network namespace that gets exactly what its
controller injects plus the manifest's container command and env (secretKeyRef and downward-API
entries resolved as the kubelet does), and an /etc/hosts (``ip netns exec`` bind-mounts
/etc/netns/<name>/hosts) that resolves the pods' DNS names -- the headless Service's, JobSet's
coordinator, PyTorchJob's per-pod Services -- to the namespaces' addresses. Two substitutions, the
ones an image and a volume make: the container's ``python`` is this interpreter, and the
claim's mount path is a shared directory of the test (both "pods" see the same run directory).

The job trains on CPU (1 rank per pod, gloo over the veth pair; the elastic PyTorchJob, ``--nnodes
1:2``, meets at its c10d endpoint ``<name>-worker-0``); once it has written a checkpoint, pod 1's
processes are all SIGKILLed (a crashed container); pod 0's islab-train then fails on its own
(lost peer), and both containers are started again, as restartPolicy OnFailure does: the job
continues from ``checkpoints/latest.pt`` of its run directory ``k8s-<name>`` (summary.json:
resumed, "Kubernetes job ... started again") and ends with identical policies on both ranks.

Two formats are simulated, one per way the pods meet: a TrainJob (a static rendezvous at node 0,
as PyTorchJob, JobSet and the Indexed Job do) and the elastic PyTorchJob (c10d). Every format's
pods are checked without namespaces by :func:`test_each_format_s_pods_plan_one_job`: the pods'
own command, in the environment their controller gives them, plans the same job with node ranks 0
and 1, node 0's address and the job's run directory -- what differs between the static formats.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from child_env import child_env
from k8s_controllers import Pod, pods_of
from netns import Node, namespace_pids, training_under_way, two_nodes, unavailable_reason, wait_until
from prerequisites import AS_ROOT_IN_CI, require

from islab.cli import run
from islab.k8s.names import RUNS_MOUNT

FORMATS = ["trainjob", "pytorchjob", "jobset", "job", "pytorchjob-elastic"]
SIMULATED = ["trainjob", "pytorchjob-elastic"]  # one static rendezvous, one c10d (the module docstring)

MAX_ITERATIONS = 8
TRAIN_TIMEOUT_S = 420.0
SECRETS = {"WANDB_API_KEY": "sim-secret-value"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_s_pods_plan_one_job(tmp_path, capsys, monkeypatch, fmt):
    pods = pods_of(write_manifest(tmp_path, capsys, fmt, Node("sim0", "veth-sim0", "127.0.0.1")))
    plans = []
    for pod in pods:
        argv = list(pod.container["command"])
        argv[argv.index(RUNS_MOUNT)] = str(tmp_path / "pvc")
        for name in [name for name in os.environ if name.startswith(("ISLAB_", "SLURM_", "PET_"))]:
            monkeypatch.delenv(name)
        for name, value in {"CUDA_VISIBLE_DEVICES": "", **pod.env(SECRETS)}.items():
            monkeypatch.setenv(name, value)
        code = run([*argv[3:], "--dry-run", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert SECRETS["WANDB_API_KEY"] not in out + err
        plans.append(json.loads(out))
    nodes = [node for plan in plans for node in plan["nodes"]]
    run_dirs = {node["argv"][node["argv"].index("--run-dir") + 1] for node in nodes}
    assert run_dirs == {str(tmp_path / "pvc" / "rsl_rl" / "Islab-Cartpole-v0" / f"k8s-sim-{fmt}")}
    if fmt.endswith("elastic"):  # c10d: torchrun numbers the nodes; all meet at worker 0's endpoint
        endpoints = {node["argv"][node["argv"].index("--rdzv_endpoint") + 1] for node in nodes}
        assert endpoints == {f"sim-{fmt}-worker-0:29500"}, endpoints
        return
    node0, node1 = nodes
    assert (node0["node_rank"], node1["node_rank"]) == (0, 1)
    masters = {tuple(node["argv"][node["argv"].index(flag) + 1] for flag in ("--master_addr", "--master_port"))
               for node in (node0, node1)}  # fmt: skip
    assert len(masters) == 1 and next(iter(masters))[0] in pods[0].dns_names, (masters, pods[0].dns_names)


@pytest.fixture
def nodes() -> Iterator[tuple[Node, Node]]:
    require(unavailable_reason(), in_ci=AS_ROOT_IN_CI)
    with two_nodes() as pair:
        yield pair


def write_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, node: Node) -> list[dict]:
    """A cluster spec without a rendezvous address: the controller provides it."""
    cluster = tmp_path / "cluster.yaml"
    fmt, _, elastic = case.partition("-")
    spec = {"lib": "rsl_rl", "device": "cpu", "nnodes": "1:2" if elastic else 2, "nproc_per_node": 1,
            "num_envs": 64, "max_iterations": MAX_ITERATIONS, "checkpoint_interval": 2,
            "env": {"GLOO_SOCKET_IFNAME": node.interface, "WANDB_API_KEY": SECRETS["WANDB_API_KEY"]}}  # fmt: skip
    if elastic:  # c10d waits this long for the second pod once the first joined (both start together)
        spec["rendezvous"] = {"last_call_s": 60}
    cluster.write_text(yaml.safe_dump(spec))
    code = run(["k8s", "--format", fmt, "--cluster", str(cluster), "--image", "islab-train:test",
                "--name", f"sim-{case}", "--logs-pvc", "runs"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and SECRETS["WANDB_API_KEY"] not in out
    return [doc for doc in yaml.safe_load_all(out) if doc]


def hosts_files(pods: list[Pod], nodes: tuple[Node, Node]) -> list[Path]:
    """/etc/netns/<namespace>/hosts for both namespaces: every pod's DNS names -> its namespace's
    address, and -- as the kubelet's /etc/hosts of a pod maps the pod's own host name to its IP --
    this machine's host name (what the namespaces share as theirs) to the namespace's own address."""
    lines = ["127.0.0.1 localhost"] + [
        f"{node.address} {' '.join(pod.dns_names)}" for pod, node in zip(pods, nodes, strict=True)
    ]
    written = []
    for node in nodes:
        folder = Path("/etc/netns") / node.namespace
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text("\n".join([*lines, f"{node.address} {socket.gethostname()}"]) + "\n")
        written.append(folder)
    return written


def start_pod(pod: Pod, node: Node, pvc: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = list(pod.container["command"])
    assert argv[:3] == ["python", "-m", "islab.cli"], argv
    assert argv.count(RUNS_MOUNT) == 1 and argv[argv.index(RUNS_MOUNT) - 1] == "--log-dir", argv
    argv[0] = sys.executable  # the image's interpreter
    argv[argv.index(RUNS_MOUNT)] = str(pvc)  # the claim, mounted
    base = child_env(("ISLAB_", "SLURM_", "PET_"))
    env = {**base, "CUDA_VISIBLE_DEVICES": "", **pod.env(SECRETS)}
    with open(log, "ab") as stderr:
        return subprocess.Popen(node.command(argv), stdout=subprocess.DEVNULL, stderr=stderr, env=env,
                                cwd=pvc.parent, start_new_session=True)  # fmt: skip


def wait_all(processes: list[subprocess.Popen[bytes]], timeout_s: float) -> list[int | None]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(process.poll() is None for process in processes):
        time.sleep(0.2)
    return [process.poll() for process in processes]


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.parametrize("fmt", SIMULATED)
def test_pods_train_and_a_restarted_pod_resumes(tmp_path, capsys, nodes, fmt):
    docs = write_manifest(tmp_path, capsys, fmt, nodes[0])
    pods = pods_of(docs)
    assert len(pods) == 2
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    logs = [tmp_path / f"pod{index}.err" for index in range(2)]
    folders = hosts_files(pods, nodes)
    try:
        started = time.monotonic()
        processes = [start_pod(pod, node, pvc, log) for pod, node, log in zip(pods, nodes, logs, strict=True)]
        run_dir = pvc / "rsl_rl" / "Islab-Cartpole-v0" / f"k8s-sim-{fmt}"

        def under_way() -> bool:
            for index, process in enumerate(processes):
                if process.poll() is not None:
                    raise AssertionError(f"pod {index} ended early:\n{logs[index].read_text()[-3000:]}")
            return training_under_way(run_dir, iterations=3) and (run_dir / "checkpoints" / "latest.pt").exists()

        wait_until(under_way, TRAIN_TIMEOUT_S, f"{fmt}: training to be under way", interval_s=0.2)
        for pid in namespace_pids(nodes[1].namespace):  # pod 1's container crashes
            os.kill(pid, 9)
        code0 = wait_all([processes[0]], 120)[0]
        assert code0 not in (None, 0), f"pod 0 should fail without its peer:\n{logs[0].read_text()[-3000:]}"
        restarted = time.monotonic()
        processes = [
            start_pod(pod, node, pvc, log) for pod, node, log in zip(pods, nodes, logs, strict=True)
        ]  # OnFailure
        codes = wait_all(processes, TRAIN_TIMEOUT_S)
        print(f"{fmt}: crash after {restarted - started:.1f} s, restarted pods done in "
              f"{time.monotonic() - restarted:.1f} s, exit codes {codes}")  # fmt: skip
        for index, code in enumerate(codes):
            assert code == 0, f"pod {index} ended with {code}:\n{logs[index].read_text()[-4000:]}"
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iteration"] == MAX_ITERATIONS and summary["world_size"] == 2
    assert (summary["resumed"] or {}).get("reason") == f"Kubernetes job sim-{fmt} started again", summary["resumed"]
    assert summary["start_iteration"] >= 2
    digests = {rank: json.loads((run_dir / "digests" / f"rank_{rank}.json").read_text())["policy_sha256"]
               for rank in (0, 1)}  # fmt: skip
    assert len(set(digests.values())) == 1, digests
    launch = yaml.safe_load((run_dir / "launch.yaml").read_text())
    assert SECRETS["WANDB_API_KEY"] not in (run_dir / "launch.yaml").read_text()
    assert launch["sources"]["nnodes"] == "k8s"  # the Kubernetes allocation supplied the node layout
