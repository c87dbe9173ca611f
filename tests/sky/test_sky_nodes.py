"""The nodes of an `islab-train sky` task, simulated in two network namespaces, train to the end, and
a recovered managed job resumes from its checkpoint.

No cloud can run here, so the task is played as SkyPilot runs it: every "node" is a network
namespace whose ``run`` script (the task's, through bash, from the workdir) gets what SkyPilot sets
in a managed job's run -- ``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS`` (one IP per line, node 0
first), ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NUM_GPUS_PER_NODE`` (0: CPU ranks), ``SKYPILOT_TASK_ID``
(``sky-managed-...``, the same in every recovery) -- plus the task's ``envs`` and ``secrets``. Two
substitutions, the ones a node image and a bucket make: ``python`` on the PATH is this interpreter,
and the bucket's mount path is a shared directory of the test (both nodes see the same run directory,
as with MOUNT_CACHED).

The job trains on CPU (1 rank per node, gloo over the veth pair); once it has written a checkpoint,
node 1's processes are all SIGKILLed (a preempted spot node); node 0's islab-train then fails on its
own (lost peer), and both nodes run again with the same task id, as SkyPilot's jobs controller
relaunches a managed job: the job continues from ``checkpoints/latest.pt`` of its run directory
(summary.json: resumed, "SkyPilot managed job ... recovered") and ends with identical policies on
both ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from child_env import child_env
from netns import Node, namespace_pids, training_under_way, two_nodes, unavailable_reason, wait_all, wait_until
from prerequisites import AS_ROOT_IN_CI, require

from islab.cli import run
from islab.sky.names import RUNS_PATH

MAX_ITERATIONS = 8
TRAIN_TIMEOUT_S = 420.0
SECRETS = {"WANDB_API_KEY": "sim-secret-value"}
TASK_ID = "sky-managed-2026-11-29-02-00-00-000000_sim-sky_1-0"


@pytest.fixture
def nodes():
    require(unavailable_reason(), in_ci=AS_ROOT_IN_CI)
    with two_nodes() as pair:
        yield pair


def write_task(tmp_path: Path, capsys: pytest.CaptureFixture[str], node: Node) -> dict:
    """A cluster spec without a rendezvous address: SkyPilot's variables provide it."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "lib": "rsl_rl", "device": "cpu", "nnodes": 2, "nproc_per_node": 1, "num_envs": 64,
        "max_iterations": MAX_ITERATIONS, "checkpoint_interval": 2,
        "env": {"GLOO_SOCKET_IFNAME": node.interface, "WANDB_API_KEY": SECRETS["WANDB_API_KEY"]},
    }))  # fmt: skip
    code = run(["sky", "--format", "managed", "--cluster", str(cluster), "--name", "sim-sky", "--bucket", "runs"])
    out = capsys.readouterr().out
    assert code == 0 and SECRETS["WANDB_API_KEY"] not in out
    return yaml.safe_load(out)


def skypilot_env(task: dict, node_rank: int, nodes: tuple[Node, Node]) -> dict[str, str]:
    """What SkyPilot exports into a managed job's run on node ``node_rank`` (CPU task: 0 GPUs)."""
    secrets = {name: SECRETS[name] for name in task.get("secrets", {})}
    return {**task.get("envs", {}), **secrets, "SKYPILOT_NODE_RANK": str(node_rank),
            "SKYPILOT_NODE_IPS": "\n".join(node.address for node in nodes), "SKYPILOT_NUM_NODES": str(len(nodes)),
            "SKYPILOT_NUM_GPUS_PER_NODE": "0", "SKYPILOT_TASK_ID": TASK_ID}  # fmt: skip


def start_node(task: dict, nodes: tuple[Node, Node], node_rank: int, bucket: Path, log: Path) -> subprocess.Popen:
    script = task["run"].replace(RUNS_PATH, str(bucket))  # the bucket, mounted
    assert task["run"].count(RUNS_PATH) == 1 and script.startswith("python -m islab.cli --sky ")
    base = child_env(("ISLAB_", "SLURM_", "PET_", "SKYPILOT_"))
    path = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"  # the node image's python
    env = {**base, "PATH": path, "CUDA_VISIBLE_DEVICES": "", **skypilot_env(task, node_rank, nodes)}
    workdir = bucket.parent / "sky_workdir"
    workdir.mkdir(exist_ok=True)
    with open(log, "ab") as stderr:
        return subprocess.Popen(nodes[node_rank].command(["bash", "-c", script]), stdout=subprocess.DEVNULL,
                                stderr=stderr, env=env, cwd=workdir, start_new_session=True)  # fmt: skip


@pytest.mark.slow
@pytest.mark.netns
def test_nodes_train_and_a_recovered_managed_job_resumes(tmp_path, capsys, nodes):
    task = write_task(tmp_path, capsys, nodes[0])
    assert task["num_nodes"] == 2 and task["secrets"] == {"WANDB_API_KEY": None}
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    logs = [tmp_path / f"node{index}.err" for index in range(2)]
    run_dir = bucket / "rsl_rl" / "Islab-Cartpole-v0" / TASK_ID
    started = time.monotonic()
    processes = [start_node(task, nodes, rank, bucket, logs[rank]) for rank in range(2)]

    def under_way() -> bool:
        for index, process in enumerate(processes):
            if process.poll() is not None:
                raise AssertionError(f"node {index} ended early:\n{logs[index].read_text()[-3000:]}")
        return training_under_way(run_dir, iterations=3) and (run_dir / "checkpoints" / "latest.pt").exists()

    wait_until(under_way, TRAIN_TIMEOUT_S, "training to be under way", interval_s=0.2)
    for pid in namespace_pids(nodes[1].namespace):  # node 1 is preempted
        os.kill(pid, 9)
    code0 = wait_all([processes[0]], 120)[0]
    assert code0 not in (None, 0), f"node 0 should fail without its peer:\n{logs[0].read_text()[-3000:]}"
    recovered = time.monotonic()
    processes = [start_node(task, nodes, rank, bucket, logs[rank]) for rank in range(2)]  # the controller relaunches
    codes = wait_all(processes, TRAIN_TIMEOUT_S)
    print(f"preempted after {recovered - started:.1f} s, the recovered job done in "
          f"{time.monotonic() - recovered:.1f} s, exit codes {codes}")  # fmt: skip
    for index, code in enumerate(codes):
        assert code == 0, f"node {index} ended with {code}:\n{logs[index].read_text()[-4000:]}"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iteration"] == MAX_ITERATIONS and summary["world_size"] == 2
    assert (summary["resumed"] or {}).get("reason") == f"SkyPilot managed job {TASK_ID} recovered", summary["resumed"]
    assert summary["start_iteration"] >= 2
    digests = {rank: json.loads((run_dir / "digests" / f"rank_{rank}.json").read_text())["policy_sha256"]
               for rank in (0, 1)}  # fmt: skip
    assert len(set(digests.values())) == 1, digests
    launch_text = (run_dir / "launch.yaml").read_text()
    assert SECRETS["WANDB_API_KEY"] not in launch_text
    assert yaml.safe_load(launch_text)["sources"]["nnodes"] == "sky"  # the SkyPilot allocation supplied it
