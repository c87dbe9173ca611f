"""Every format `islab-train sky` writes, loaded by SkyPilot's own task loader (offline, no cloud).

``sky.Task.from_yaml_config`` is what ``sky launch`` and ``sky jobs launch`` run on a task file
before anything else: SkyPilot's JSON schemas for the task, its ``resources`` and each storage in
``file_mounts`` (sky/utils/schemas.py), then the resources and storage objects built, unknown keys
refused; no cloud is contacted and no credentials are needed. SkyPilot 0.14 needs click<8.2 and our
W&B pin click>=8.2, so SkyPilot lives in .venv-sky (scripts/setup.sh) and runs the loader in one
subprocess for all tasks (tests/skypilot_loader.py). A misspelled field planted in each format must be
refused, so a green test means the loader really looked; SkyPilot's names that islab-train mirrors
(its run variables, cluster names, clouds) are compared with its constants.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import REPO, TESTS
from prerequisites import require

from islab.cli import run
from islab.sky import names
from islab.sky.options import NAME

SKY_PYTHON = Path(os.environ.get("ISLAB_SKY_PYTHON", REPO / ".venv-sky" / "bin" / "python"))
# A 2-node job with a secret and a plain env value in the cluster file (rsl_rl).
CLUSTER_YAML = """\
lib: rsl_rl
nnodes: 2
env:
  WANDB_API_KEY: do-not-print-me
  NCCL_DEBUG: WARN
"""
FORMATS = {
    "job": ["--gpus", "8", "--gpus-type", "H100", "--cloud", "aws", "--bucket", "islab-runs"],
    "job-cpu-node-disk": ["--device", "cpu", "--nproc", "2", "--env", "OMP_NUM_THREADS=1"],
    "managed": ["--format", "managed", "--gpus", "8", "--gpus-type", "H100", "--spot", "--bucket",
                "s3://team-bucket/islab", "--logger", "wandb", "--image", "nvcr.io/nvidia/isaac-lab:3.0.0"],
    "managed-volume": ["--format", "managed", "--gpus", "4", "--gpus-type", "L40S", "--cloud", "gcp", "--spot",
                       "--volume", "islab-runs", "--secret", "HF_TOKEN"],
}  # fmt: skip
# One misspelled field per format, in each part SkyPilot validates: (where, the field, its misspelling).
PLANTED = {
    "job": ((), "num_nodes", "num_node"),
    "job-cpu-node-disk": ((), "envs", "env"),
    "managed": (("resources",), "job_recovery", "job_recovry"),
    "managed-volume": (("resources",), "use_spot", "use-spot"),
}


def misspelled(task: dict[str, Any], where: tuple[str, ...], field: str, wrong: str) -> dict[str, Any]:
    planted = copy.deepcopy(task)
    holder = planted
    for key in where:
        holder = holder[key]
    holder[wrong] = holder.pop(field)
    return planted


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every format's task and its misspelled twin, through SkyPilot's loader in one process."""
    require(None if SKY_PYTHON.exists() else f"{SKY_PYTHON} not found (bash scripts/setup.sh makes .venv-sky)")
    folder = tmp_path_factory.mktemp("sky")
    cluster = folder / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    tasks: dict[str, Any] = {}
    for fmt, args in FORMATS.items():
        target = folder / f"{fmt}.yaml"
        assert run(["sky", "--cluster", str(cluster), "--name", "rsl-2x8", *args, "-o", str(target)]) == 0
        text = target.read_text()
        assert "do-not-print-me" not in text
        tasks[fmt] = yaml.safe_load(text)
        tasks[f"{fmt}/planted"] = misspelled(tasks[fmt], *PLANTED[fmt])
    env = {**os.environ, "HOME": str(folder)}  # SkyPilot may create ~/.sky: keep it in the test's folder
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(SKY_PYTHON), str(TESTS / "skypilot_loader.py")], input=json.dumps({"tasks": tasks}),
                          capture_output=True, text=True, cwd=folder, env=env, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {"tasks": tasks, **json.loads(done.stdout)}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_skypilot_loads_every_format(loaded, fmt):
    result = loaded["results"][fmt]
    assert result["ok"], result["error"]
    args = FORMATS[fmt]
    assert result["num_nodes"] == 2
    (resources,) = result["resources"]
    if "--gpus-type" in args:
        assert resources["accelerators"] == {args[args.index("--gpus-type") + 1]: int(args[args.index("--gpus") + 1])}
    assert resources["use_spot"] == ("--spot" in args)
    if "--bucket" in args:
        assert result["storage_modes"] == {names.RUNS_PATH: names.RUNS_STORAGE_MODE}
    assert "WANDB_API_KEY" in result["secrets"] and "WANDB_API_KEY" not in result["envs"]
    assert result["envs"].get("NCCL_DEBUG") == "WARN"


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_misspelled_field_is_refused(loaded, fmt):
    result = loaded["results"][f"{fmt}/planted"]
    wrong = PLANTED[fmt][2]
    assert not result["ok"], f"SkyPilot accepted the misspelled {wrong!r}"
    assert wrong in result["error"], result["error"]


def test_the_names_islab_train_mirrors_are_skypilot_s(loaded):
    constants = loaded["constants"]
    theirs = [constants[name] for name in ("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES",
                                           "SKYPILOT_NUM_GPUS_PER_NODE", "TASK_ID_ENV_VAR")]  # fmt: skip
    ours = [names.NODE_RANK_VARIABLE, names.NODE_IPS_VARIABLE, names.NUM_NODES_VARIABLE, names.GPUS_PER_NODE_VARIABLE,
            names.TASK_ID_VARIABLE]  # fmt: skip
    assert ours == theirs
    assert constants["CLUSTER_NAME_VALID_REGEX"] == NAME.pattern
    assert tuple(cloud.lower() for cloud in constants["ALL_CLOUDS"]) == names.CLOUDS
    assert re.fullmatch(NAME, "rsl-2x8")
