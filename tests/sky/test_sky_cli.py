"""`islab-train sky` on the command line, and the SkyPilot allocation inside a node (fast, no cloud).

Bad input is one line per problem on stderr naming the option and the fix, exit code 2, nothing on
stdout (so `> task.yaml` writes no half task), and a secret's value typed on the command line is
refused without being echoed. Inside a node, SkyPilot's run variables become the spec's node layout,
below the command line and above ISLAB_* and the cluster file, and the dry run names the variable
each value came from (`source: sky, SKYPILOT_NODE_RANK`).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import yaml
from paths import REPO

from islab.cli.sky_command import run_extras
from islab.sky.allocation import allocation_from_environ, in_skypilot_run
from islab.sky.names import RUNS_PATH
from islab.spec.issues import SpecError

GPU = ["--gpus", "8", "--gpus-type", "H100"]
SECRET_VALUE = "sk-do-not-print-1234"


@pytest.mark.parametrize(
    "args, field",
    [
        (["--gpus", "8"], "--gpus-type"),  # a GPU job without an accelerator: SkyPilot would start CPU nodes
        (["--device", "cpu", "--gpus-type", "H100"], "--gpus-type"),
        ([*GPU, "--gpus-type", "H100:8"], "--gpus-type"),  # the count follows the ranks
        (["--device", "cpu", "--env", f"WANDB_API_KEY={SECRET_VALUE}"], "--env WANDB_API_KEY"),
        (["--device", "cpu", "--env", f"HF_TOKEN={SECRET_VALUE}"], "--env HF_TOKEN"),
        (["--device", "cpu", "--secret", f"HF_TOKEN={SECRET_VALUE}"], "--secret HF_TOKEN"),
        (["--device", "cpu", "--env", "NO_VALUE"], "--env NO_VALUE"),
        ([*GPU, "--spot"], "--spot"),  # a preempted node takes the checkpoint with it
        ([*GPU, "--spot", "--format", "managed"], "--spot"),
        (["--device", "cpu", "--format", "manged"], "--format"),
        (["--device", "cpu", "--name", "9-starts-with-a-digit"], "--name"),
        (["--device", "cpu", "--name", "under_score_"], "--name"),
        (["--device", "cpu", "--cloud", "awz"], "--cloud"),
        (["--device", "cpu", "--bucket", "runs", "--volume", "runs"], "--bucket / --volume"),
        (["--device", "cpu", "--nnodes", "1:2", "--rdzv-backend", "c10d"], "--nnodes"),
        (["--lib", "torch", "--device", "cpu"], "--lib"),
    ],
)
def test_bad_input_exits_2_with_nothing_on_stdout(islab, args, field):
    code, out, err = islab("sky", *args)
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    assert any(line.startswith(f"error: {field}") for line in lines), err
    assert SECRET_VALUE not in err


def task_of(islab, *args: str) -> tuple[dict, str, str]:
    code, out, err = islab("sky", *args)
    assert code == 0, err
    return yaml.safe_load(out), out, err


def test_the_nodes_get_the_flattened_spec_and_the_secrets_by_name(islab, tmp_path):
    """Command line, ISLAB_* and cluster file reach `run` as options; node layout and log dir do not."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "lib": "rsl_rl", "nnodes": 2, "num_envs": 4096, "seed": 7, "log_dir": "/somewhere/local",
        "rendezvous": {"timeout_s": 90}, "env": {"HF_TOKEN": SECRET_VALUE, "NCCL_DEBUG": "WARN"},
    }))  # fmt: skip
    task, out, err = task_of(islab, "--cluster", str(cluster), "--gpus", "8", "--gpus-type", "H100", "--cloud",
                             "AWS", "--name", "g1-2x8", "--logger", "wandb", "--bucket", "islab-runs",
                             "--max-iterations", "5", "--env", "OMP_NUM_THREADS=4", "--secret", "HF_TOKEN",
                             "algorithm.learning_rate=3e-4")  # fmt: skip
    assert SECRET_VALUE not in out + err
    assert task["name"] == "g1-2x8" and task["num_nodes"] == 2 and task["workdir"] == "."
    assert task["resources"] == {"accelerators": "H100:8", "infra": "aws"}
    assert task["envs"] == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"}
    assert task["secrets"] == {"HF_TOKEN": None, "WANDB_API_KEY": None}
    assert task["file_mounts"] == {RUNS_PATH: {"name": "islab-runs", "mode": "MOUNT_CACHED"}}
    assert task["setup"] == "python -m pip install -e '.[wandb]'\n"
    command = task["run"].split()
    assert command[:4] == ["python", "-m", "islab.cli", "--sky"]
    text = " ".join(command)
    for option in ["--lib rsl_rl", "--nproc 8", "--device cuda", "--num-envs 4096", "--seed 7", "--rdzv-timeout 90",
                   "--max-iterations 5", "--logger wandb", f"--log-dir {RUNS_PATH}"]:  # fmt: skip
        assert option in text, text
    assert command[-1] == "algorithm.learning_rate=3e-4"
    assert "--nnodes" not in command and "--cluster" not in command and "/somewhere/local" not in text
    assert "sky launch -c g1-2x8 task.yaml --secret HF_TOKEN --secret WANDB_API_KEY" in err
    assert "sky down g1-2x8" in err and "sky logs g1-2x8" in err


def test_managed_jobs_recover_on_the_preemption_exit_code_from_storage(islab, tmp_path):
    target = tmp_path / "task.yaml"
    code, out, err = islab("sky", "--format", "managed", *GPU, "--nnodes", "2", "--spot", "--volume", "runs",
                           "--name", "spot", "-o", str(target))  # fmt: skip
    assert code == 0 and out == "", err
    task = yaml.safe_load(target.read_text())
    assert task["resources"]["use_spot"] is True
    assert task["resources"]["job_recovery"] == {"recover_on_exit_codes": [75]}
    assert task["volumes"] == {RUNS_PATH: "runs"} and "file_mounts" not in task
    assert f"sky jobs launch -n spot {target}" in err and "sky jobs cancel -n spot" in err
    assert target.read_text().startswith("# Written by `islab-train sky --format managed`")


def test_an_existing_bucket_is_mounted_by_its_url_and_a_cpu_job_has_no_accelerators(islab):
    task, _, err = task_of(islab, "--device", "cpu", "--nproc", "2", "--bucket", "s3://team-bucket/islab")
    assert task["file_mounts"] == {RUNS_PATH: {"source": "s3://team-bucket/islab", "mode": "MOUNT_CACHED"}}
    assert "accelerators" not in task["resources"]
    task, _, err = task_of(islab, "--device", "cpu")  # no storage: the node's own disk, and a warning
    assert "file_mounts" not in task and "volumes" not in task and "--log-dir" not in task["run"]
    assert "warning: no --bucket or --volume" in err


def test_setup_installs_the_extras_the_run_needs():
    """skrl-JAX's, W&B's, and a task's own: mjlab's tasks announce the [mjlab] extra in their entry point."""
    mjlab = SimpleNamespace(task="Mjlab-Velocity-Flat-Unitree-Go1", ml_framework="torch", logger="tensorboard")
    assert run_extras(mjlab) == ("mjlab",)
    jax = SimpleNamespace(task="Islab-Cartpole-v0", ml_framework="jax", logger="wandb")
    assert run_extras(jax) == ("jax", "wandb")


# ----------------------------------------------------------------------------------------------
# Inside a node
# ----------------------------------------------------------------------------------------------

TASK_ID = "sky-managed-2026-11-29-01-50-00-123456_g1-2x8_3-0"
NODE_1 = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n", "SKYPILOT_NUM_NODES": "2",
          "SKYPILOT_NUM_GPUS_PER_NODE": "0", "SKYPILOT_TASK_ID": TASK_ID}  # fmt: skip


def test_skypilot_s_variables_give_the_node_layout():
    assert in_skypilot_run(NODE_1)
    allocation = allocation_from_environ(NODE_1)
    layer = allocation.layer({})
    assert (layer["nnodes"].value, layer["node_rank"].value) == (2, 1)
    assert layer["rendezvous.master_addr"].value == "10.0.0.5"  # the first line of SKYPILOT_NODE_IPS
    port = layer["rendezvous.master_port"].value
    assert 20000 <= port < 40000 and "nproc_per_node" not in layer
    assert allocation.run_leaf == TASK_ID  # the same in every recovery of the managed job
    c10d = allocation.layer({"rendezvous.backend": "c10d"})
    assert c10d["rendezvous.endpoint"].value == f"10.0.0.5:{port}" and c10d["rendezvous.id"].value == TASK_ID
    jax = allocation.layer({"lib": "skrl", "ml_framework": "jax"})
    assert jax["coordinator_address"].value == f"10.0.0.5:{port}"
    gpus = allocation_from_environ({**NODE_1, "SKYPILOT_NUM_GPUS_PER_NODE": "8"}).layer({})
    assert gpus["nproc_per_node"].value == 8


@pytest.mark.parametrize(
    "change, variable",
    [({"SKYPILOT_NUM_NODES": None}, "SKYPILOT_NUM_NODES"), ({"SKYPILOT_NODE_IPS": ""}, "SKYPILOT_NODE_IPS"),
     ({"SKYPILOT_NUM_NODES": "3"}, "SKYPILOT_NODE_IPS"), ({"SKYPILOT_NODE_RANK": "2"}, "SKYPILOT_NODE_RANK"),
     ({"SKYPILOT_NODE_RANK": "one"}, "SKYPILOT_NODE_RANK")],
)  # fmt: skip
def test_a_missing_or_odd_variable_is_named(change, variable):
    environ = {key: value for key, value in {**NODE_1, **change}.items() if value is not None}
    with pytest.raises(SpecError) as caught:
        allocation_from_environ(environ)
    (issue,) = caught.value.issues
    assert issue.field == variable and "islab-train sky" in issue.fix


def test_setup_and_ssh_sessions_are_not_a_run():
    assert not in_skypilot_run({"SKYPILOT_SETUP_NODE_RANK": "0", "SKYPILOT_SETUP_NODE_IPS": "10.0.0.5"})
    assert not in_skypilot_run({"SKYPILOT_NUM_NODES": "2"})


def test_dry_run_inside_a_node_shows_the_allocation(islab, monkeypatch):
    for name, value in NODE_1.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ISLAB_NNODES", "5")  # ISLAB_* is below the allocation
    code, out, err = islab("--device", "cpu", "--dry-run")
    assert code == 0, err
    assert re.search(r"nnodes += 2 +\(source: sky, SKYPILOT_NUM_NODES\)", out), out
    assert re.search(r"node_rank += 1 +\(source: sky, SKYPILOT_NODE_RANK\)", out), out
    assert re.search(r"master_addr += 10\.0\.0\.5 +\(source: sky, SKYPILOT_NODE_IPS \(first line\)\)", out), out
    assert f"/{TASK_ID}" in out  # the run directory every recovery of the job finds again
    code, out, _ = islab("--device", "cpu", "--node-rank", "0", "--dry-run")  # the command line still wins
    assert code == 0 and re.search(r"node_rank += 0 +\(source: cli", out), out
    monkeypatch.delenv("ISLAB_NNODES")
    code, out, _ = islab("--device", "cpu", "--no-sky", "--dry-run")
    assert code == 0 and TASK_ID not in out and re.search(r"nnodes += 1 +\(source: default", out), out


# ----------------------------------------------------------------------------------------------
# docs/CLOUD.md: its task is what the command writes
# ----------------------------------------------------------------------------------------------


def test_the_docs_task_is_what_the_command_writes(islab, tmp_path):
    text = (REPO / "docs" / "CLOUD.md").read_text()
    command = re.search(r"^    (islab-train sky --format managed .*--name rsl-2x8 -o task\.yaml)$", text, re.M).group(1)
    block = re.search(r"```yaml\n(# Written by `islab-train sky --format managed`.*?)```", text, re.S).group(1)
    args = command.split()[1:]
    args[args.index("-o") + 1] = str(tmp_path / "task.yaml")
    code, _, err = islab(*args)
    assert code == 0, err
    written = (tmp_path / "task.yaml").read_text().replace(str(tmp_path / "task.yaml"), "task.yaml")
    assert written == block, "docs/CLOUD.md's task is out of date: write it again with the command above it"
