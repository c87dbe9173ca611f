"""Elastic restarts: torchrun --max_restarts restarts the whole worker group when a rank dies; the
restarted ranks resume from the run's checkpoints/latest.pt and stop at the iteration the job was
asked to reach (Isaac Lab would start again from scratch)."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from child_env import child_env
from ports import port_for_a_child

from islab.worker.checkpoint import FORMAT, identity
from islab.worker.collectives import SingleProcess
from islab.worker.resume import find_resume_point, last_reported_iteration, same_job

TASK = "Islab-Cartpole-v0"
RUN_IDENTITY = identity("rsl_rl", "torch", TASK, (4,), (1,))


def write_checkpoint(
    path: Path, iteration: int, target: int, job_id: str | None = None, slurm_job_id: str | None = None,
    scheduler_job: str | None = None,
) -> None:  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = {"target_iteration": target, "job_id": job_id, "scheduler_job": scheduler_job}
    if slurm_job_id is not None:  # what islab-train wrote before the launcher told the ranks their job
        spec["slurm_job_id"] = slurm_job_id
    checkpoint = {"format": FORMAT, **RUN_IDENTITY, "iteration": iteration, "spec": spec}
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    path.write_bytes(buffer.getvalue())


def args(
    run_dir: Path, max_iterations: int = 10, resume: Path | None = None, *, job: str | None = None,
    restart: str | None = None,
) -> argparse.Namespace:  # fmt: skip
    """The worker's arguments that decide where it starts (the launcher writes ``--scheduler-job`` and
    ``--job-restart`` from the allocation: islab.resolve.job)."""
    return argparse.Namespace(
        run_dir=run_dir, max_iterations=max_iterations, resume=resume, scheduler_job=job, job_restart=restart
    )


def test_first_attempt_trains_what_was_asked(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "checkpoints" / "latest.pt", 6, 10)  # ignored: not a restart
    point = find_resume_point(args(tmp_path), SingleProcess(), RUN_IDENTITY, {})
    assert (point.checkpoint, point.target_iteration, point.reason) == (None, 10, "new")


def test_restart_resumes_latest_and_keeps_the_original_target(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "checkpoints" / "latest.pt", 6, 10, job_id="job-a")
    environ = {"TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_RUN_ID": "job-a"}
    point = find_resume_point(args(tmp_path), SingleProcess(), RUN_IDENTITY, environ)
    assert point.checkpoint["iteration"] == 6
    assert point.target_iteration == 10  # not 6 + 10
    assert point.reason == "elastic restart 1"


def test_restart_of_a_resumed_job_before_its_first_checkpoint(tmp_path: Path) -> None:
    """No latest.pt of this job yet: resume what --resume named, as the first attempt did."""
    write_checkpoint(tmp_path / "old" / "checkpoints" / "latest.pt", 20, 20)
    environ = {"TORCHELASTIC_RESTART_COUNT": "2"}
    point = find_resume_point(args(tmp_path / "new", 5, tmp_path / "old"), SingleProcess(), RUN_IDENTITY, environ)
    assert point.checkpoint["iteration"] == 20 and point.target_iteration == 25 and point.reason == "resume"


def test_restart_ignores_a_latest_of_another_job(tmp_path: Path) -> None:
    """A run resumed in place: latest.pt may still be the previous job's, with its own target."""
    write_checkpoint(tmp_path / "checkpoints" / "latest.pt", 20, 20, job_id="job-old")
    environ = {"TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_RUN_ID": "job-new"}
    point = find_resume_point(args(tmp_path, 5, tmp_path), SingleProcess(), RUN_IDENTITY, environ)
    assert point.reason == "resume" and point.target_iteration == 25
    plain = args(tmp_path)
    assert same_job({"spec": {"job_id": "none"}}, plain, {"TORCHELASTIC_RUN_ID": "job-new"})  # static: no id
    assert not same_job({"spec": {"job_id": "job-old"}}, plain, {"TORCHELASTIC_RUN_ID": "job-new"})


def test_requeued_slurm_job_resumes_its_own_latest_to_the_original_target(tmp_path: Path) -> None:
    """A requeued SLURM job (the launcher saw SLURM_RESTART_COUNT > 0 and passes ``--job-restart``)
    continues by itself from a checkpoint its own job wrote; the rank reads no SLURM variable."""
    path = tmp_path / "checkpoints" / "latest.pt"
    write_checkpoint(path, 4, 10, scheduler_job="slurm-77")
    requeued = {"job": "slurm-77", "restart": "SLURM requeue 1"}
    environ = {"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "78", "SLURM_RESTART_COUNT": "0"}  # never read
    point = find_resume_point(args(tmp_path, **requeued), SingleProcess(), RUN_IDENTITY, environ)
    assert (point.checkpoint["iteration"], point.target_iteration, point.reason) == (4, 10, "SLURM requeue 1")
    assert point.is_restart  # the worker counts the iterations this restart redoes
    # the first run of the job, or another job's checkpoint (a run resumed in place): no requeue resume
    first = find_resume_point(args(tmp_path, job="slurm-77"), SingleProcess(), RUN_IDENTITY, {})
    assert first.reason == "new" and first.target_iteration == 10 and not first.is_restart
    another_job = args(tmp_path, 5, tmp_path, job="slurm-78", restart="SLURM requeue 1")
    other = find_resume_point(another_job, SingleProcess(), RUN_IDENTITY, {})
    assert other.reason == "resume" and other.target_iteration == 9 and not other.is_restart
    # a checkpoint of an older islab-train, which recorded only the SLURM job id, is still this job's
    write_checkpoint(path, 4, 10, slurm_job_id="77")
    assert find_resume_point(args(tmp_path, **requeued), SingleProcess(), RUN_IDENTITY, {}).reason == "SLURM requeue 1"
    # requeued before its first checkpoint: starts as the first attempt did
    path.unlink()
    assert find_resume_point(args(tmp_path, **requeued), SingleProcess(), RUN_IDENTITY, {}).reason == "new"


def test_last_reported_iteration_skips_a_torn_line(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    assert last_reported_iteration(progress) is None
    progress.write_text('{"iteration": 4}\n{"iteration": 5}\n{"iterat')
    assert last_reported_iteration(progress) == 5


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_torchrun_restart_resumes_and_ends_at_the_requested_iteration(tmp_path: Path, mode: str) -> None:
    """rank 1 fails after iteration 5 once; checkpoints every 2 iterations -> resume at 4, lose 1."""
    run_dir = tmp_path / "run"
    port = port_for_a_child()
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
        "--max_restarts", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
        "-m", "islab.worker", "--lib", "rsl_rl", "--task", TASK, "--num-envs", "64", "--seed", "1",
        "--max-iterations", "8", "--device", "cpu", "--run-dir", str(run_dir), "--distributed",
        "--checkpoint-interval", "2",
    ]  # fmt: skip
    env = child_env(("ISLAB_", "RANK", "WORLD_SIZE", "TORCHELASTIC"))
    env.update(
        ISLAB_THREADS_PER_RANK="1",
        ISLAB_TEST_CRASH_RANK="1",
        ISLAB_TEST_CRASH_AT_ITERATION="5",
        ISLAB_TEST_CRASH_ONCE="1",
        ISLAB_TEST_CRASH_MODE=mode,
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test fault injection: rank 1 fails after iteration 5" in (run_dir / "logs" / "rank_1.log").read_text()

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iteration"] == 8 and summary["start_iteration"] == 4 and summary["iterations"] == 4
    assert summary["resumed"]["reason"] == "elastic restart 1"
    assert summary["resumed"]["lost_iterations"] == 1  # iteration 5 was done, then redone
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert iterations == [1, 2, 3, 4, 5, 5, 6, 7, 8]  # append-only: the redone iteration appears twice
    assert torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)["iteration"] == 8
    digests = {json.loads(p.read_text())["policy_sha256"] for p in run_dir.glob("digests/rank_*.json")}
    assert len(digests) == 1
