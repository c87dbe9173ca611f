"""``--logger wandb``: the option reaches the worker; rank 0 alone logs one Weights & Biases run per run
directory with the job's env steps as the step axis, and ``--resume RUN_DIR`` continues that run.

The end-to-end test runs real torchrun with two CPU ranks and real wandb in offline mode (its files
on disk, no network), and reads the run back from wandb's ``.wandb`` transaction log, decoded with
wandb's own protobuf schema. CI installs wandb (scripts/setup.sh, the [wandb] extra): with CI=true a
missing wandb fails these tests instead of skipping them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env

from islab import rundir
from islab.worker.wandb_logger import metrics_of

HAVE_WANDB = importlib.util.find_spec("wandb") is not None
needs_wandb = pytest.mark.skipif(
    not HAVE_WANDB and os.environ.get("CI") != "true",
    reason="wandb is not installed (the [wandb] extra; CI installs it and fails here without it)",
)


def worker_argv(islab, *args: str) -> list[str]:
    code, out, err = islab(*args, "--device", "cpu", "--dry-run", "--json")
    assert code == 0, err
    (node,) = json.loads(out)["nodes"]
    return node["argv"]


# -- the option -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("clean_environment")
def test_tensorboard_is_the_default_and_adds_nothing_to_the_worker(islab) -> None:
    assert "--logger" not in worker_argv(islab)


@needs_wandb
@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize("given", ["flag", "env", "yaml"])
def test_wandb_reaches_the_worker_from_the_flag_the_variable_or_the_cluster_file(
    islab, given: str, tmp_path: Path, monkeypatch
) -> None:
    args: tuple[str, ...] = ("--logger", "wandb")
    if given == "env":
        monkeypatch.setenv("ISLAB_LOGGER", "wandb")
        args = ()
    elif given == "yaml":
        (tmp_path / "cluster.yaml").write_text("logger: wandb\n")
        args = ("--cluster", str(tmp_path / "cluster.yaml"))
    argv = worker_argv(islab, *args)
    assert argv[argv.index("--logger") + 1] == "wandb"


@pytest.mark.usefixtures("clean_environment")
def test_an_unknown_logger_is_one_line_and_exit_2(islab) -> None:
    code, out, err = islab("--logger", "mlflow", "--dry-run")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error:") and "tensorboard" in err, err


@pytest.mark.usefixtures("clean_environment")
def test_wandb_without_the_extra_is_refused_before_launch(islab, monkeypatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "wandb" else real_find_spec(name, *rest)
    )
    code, out, err = islab("--logger", "wandb", "--device", "cpu", "--dry-run")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: logger") and '-e ".[wandb]"' in line, err


# -- pure parts -------------------------------------------------------------------------------------


def test_the_run_id_is_derived_once_and_then_read_from_the_run_directory(tmp_path: Path) -> None:
    first = rundir.wandb_run_id(tmp_path / "run")
    assert first == rundir.wandb_run_id(tmp_path / "run") != rundir.wandb_run_id(tmp_path / "other")
    (tmp_path / "run").rename(tmp_path / "moved")
    assert rundir.wandb_run_id(tmp_path / "moved") == first  # the stored id, not one derived anew


def test_metrics_use_the_job_env_steps_and_leave_out_what_is_unknown() -> None:
    record = {"iteration": 3, "env_steps": 100, "job_env_steps": 700, "mean_return": None, "steps_per_s": 5.0,
              "losses": {"value": 0.5}}  # fmt: skip
    assert metrics_of(record) == {"iteration": 3, "env_steps": 700, "steps_per_s": 5.0, "loss/value": 0.5}


# -- end to end -------------------------------------------------------------------------------------

WANDB_BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of 7-byte-headed chunks


def wandb_records(path: Path) -> list:
    """Every record of an offline run's ``run-<id>.wandb`` file, as wandb's own protobuf ``Record``."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    position, pending, records = 7, b"", []
    while position + 7 <= len(data):
        left_in_block = WANDB_BLOCK - position % WANDB_BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left_in_block < 7 or (kind == 0 and length == 0):  # block trailer / padding
            position += left_in_block
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST chunk: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def metric_name(item) -> str:
    return item.key or "/".join(item.nested_key)


def offline_run(directory: Path) -> tuple[str, list[tuple[int, dict]]]:
    """(run id, [(step, metrics)]) of one offline-run-* directory."""
    (log,) = directory.glob("run-*.wandb")
    records = wandb_records(log)
    (run_id,) = {record.run.run_id for record in records if record.WhichOneof("record_type") == "run"}
    history = [
        (record.history.step.num, {metric_name(item): json.loads(item.value_json) for item in record.history.item})
        for record in records
        if record.WhichOneof("record_type") == "history"
    ]
    return run_id, history


def islab_train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = child_env(("ISLAB_", "WANDB_", "RANK", "WORLD_SIZE"))
    # offline: the run's files on disk, no network; wandb's other folders inside tmp too
    env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        env[name] = str(tmp_path / "wandb-home" / name.lower())
    command = [sys.executable, "-m", "islab.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


@needs_wandb
@pytest.mark.slow
def test_rank_0_logs_one_run_on_the_env_step_axis_and_a_resume_continues_it(tmp_path: Path) -> None:
    result = islab_train(
        tmp_path, "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "64", "--max-iterations", "2",
        "--log-dir", str(tmp_path / "logs"), "--run-name", "wb", "--logger", "wandb",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "rsl_rl" / "Islab-Cartpole-v0").glob("*_wb")
    (first,) = tmp_path.rglob("offline-run-*")  # exactly one run: rank 0's
    assert first.parent == run_dir / "wandb"
    run_id, history = offline_run(first)
    assert run_id == (run_dir / rundir.WANDB_RUN_ID_FILE).read_text().strip()
    progress = rundir.read_progress(run_dir)
    steps_per_iteration = 2 * 64 * 16  # ranks x envs x rsl_rl's num_steps_per_env
    assert [step for step, _ in history] == [record["job_env_steps"] for record in progress]
    assert [step for step, _ in history] == [steps_per_iteration, 2 * steps_per_iteration]
    assert [metrics["iteration"] for _, metrics in history] == [1, 2]
    assert {"mean_return", "steps_per_s", "env_steps", "loss/value", "loss/surrogate"} <= set(history[-1][1])

    resumed = islab_train(tmp_path, "--resume", str(run_dir), "--max-iterations", "2")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    runs = sorted(tmp_path.rglob("offline-run-*"))
    assert len(runs) == 2 and first in runs, runs  # wandb keeps one folder per process, offline
    (second,) = (run for run in runs if run != first)
    second_id, continued = offline_run(second)
    assert second_id == run_id, "the resume started another wandb run"
    assert [step for step, _ in continued] == [3 * steps_per_iteration, 4 * steps_per_iteration]
    assert [metrics["iteration"] for _, metrics in continued] == [3, 4]
