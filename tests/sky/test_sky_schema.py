"""Every format `islab-train sky` writes, loaded by SkyPilot's own task loader (offline, no cloud).

``sky.Task.from_yaml_config`` is what ``sky launch`` and ``sky jobs launch`` run on a task file
before anything else: it checks the task against SkyPilot's JSON schemas (sky/utils/schemas.py:
the task, its ``resources``, each storage in ``file_mounts``), builds the resources (an unknown
accelerator name is refused there) and the storage objects, and refuses unknown keys. No cloud is
contacted and no credentials are needed. A misspelled field planted in each format must be refused,
so a green test means the loader really looked.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from islab.cli import run
from islab.sky.names import CLOUDS

pytestmark = pytest.mark.needs("sky")

# A 2-node job with a secret and a plain env value in the cluster file (rsl_rl, 8 GPUs a node).
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


def misspell(task: dict[str, Any], where: tuple[str, ...], field: str, wrong: str) -> None:
    holder = task
    for key in where:
        holder = holder[key]
    holder[wrong] = holder.pop(field)


def task_of(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> dict[str, Any]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    code = run(["sky", "--cluster", str(cluster), "--name", "rsl-2x8", *FORMATS[fmt]])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "do-not-print-me" not in out
    return yaml.safe_load(out)


def load(task: dict[str, Any]) -> Any:
    """SkyPilot's loader; the secrets are given at launch (``sky launch --secret NAME``), as here."""
    import sky

    secrets = {name: "value-given-at-launch" for name in task.get("secrets") or {}}
    return sky.Task.from_yaml_config(copy.deepcopy(task), secrets_overrides=list(secrets.items()) or None)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_skypilot_loads_every_format(tmp_path, capsys, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)  # workdir: . must exist where sky is run
    task = task_of(tmp_path, capsys, fmt)
    loaded = load(task)
    assert loaded.num_nodes == 2
    (resources,) = list(loaded.resources)
    if "--gpus-type" in FORMATS[fmt]:
        gpus = FORMATS[fmt][FORMATS[fmt].index("--gpus-type") + 1]
        assert resources.accelerators == {gpus: int(FORMATS[fmt][FORMATS[fmt].index("--gpus") + 1])}
    assert resources.use_spot == ("--spot" in FORMATS[fmt])
    assert "do-not-print-me" not in yaml.safe_dump(task)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_misspelled_field_is_refused(tmp_path, capsys, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    task = task_of(tmp_path, capsys, fmt)
    where, field, wrong = PLANTED[fmt]
    misspell(task, where, field, wrong)
    with pytest.raises(Exception) as refused:  # SkyPilot raises jsonschema's or its own ValueError subclasses
        load(task)
    assert wrong in str(refused.value), refused.value


def test_our_cloud_names_are_skypilot_s():
    from sky.skylet import constants

    assert tuple(cloud.lower() for cloud in constants.ALL_CLOUDS) == CLOUDS
