"""End to end through the real launcher: `islab-train ... --device cpu --nproc 2` with real torchrun
(or skrl's JAX launcher path), real gloo collectives, real libraries. Each job must exit 0, write
TensorBoard events and a loadable checkpoint, and leave both ranks with the identical policy (that is
checked on every library path's 2-rank learning run: tests/e2e/test_learning.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from child_env import child_env
from prerequisites import require_modules
from training_runs import ISLAB_TRAIN, PATHS, launch

TASK = "Islab-Cartpole-v0"


def the_run_dir(tmp_path: Path, lib: str) -> Path:
    (run_dir,) = (tmp_path / "logs" / lib / TASK).glob("*_e2e")
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "ml_framework"), PATHS)
def test_a_failing_rank_fails_the_job_and_is_named(tmp_path: Path, lib: str, ml_framework: str) -> None:
    if ml_framework == "jax":
        require_modules("jax")
    crash_after_iteration_2 = {"ISLAB_TEST_CRASH_RANK": "1", "ISLAB_TEST_CRASH_AT_ITERATION": "2"}
    result = launch(tmp_path, lib, ml_framework, env=crash_after_iteration_2)
    assert result.returncode != 0
    last_lines = (result.stdout + result.stderr).strip().splitlines()[-15:]
    message = "\n".join(last_lines)
    assert "rank 1" in message and "rank_1.log" in message and "node 0" in message, message
    assert "RuntimeError: test fault injection" in message, message  # the traceback's last line


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
def test_resume_a_run_directory_continues_its_iterations(tmp_path: Path) -> None:
    """`islab-train --resume RUN_DIR` alone continues with the stored spec (library, ranks, envs,
    device: none repeated); paths printed for a relative --log-dir work from any directory."""
    first = launch(tmp_path, "rsl_rl", "torch", "--checkpoint-interval", "2")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    run_dir = the_run_dir(tmp_path, "rsl_rl")
    assert summary_of(run_dir)["iteration"] == 3
    resume = f"islab-train --resume {run_dir}"
    assert first.stdout.rstrip().splitlines()[-1].strip() == resume, first.stdout[-2000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    second = subprocess.run(
        [*ISLAB_TRAIN, "--resume", os.path.relpath(run_dir, elsewhere), "--max-iterations", "2"],
        capture_output=True, text=True, timeout=600, env=environment, cwd=elsewhere,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"run directory: {run_dir}" in second.stderr  # absolute, not relative to `elsewhere`
    assert second.stdout.rstrip().splitlines()[-1].strip() == resume
    summary = summary_of(run_dir)  # the resumed run continues in the same run directory
    assert (summary["start_iteration"], summary["iteration"], summary["world_size"]) == (3, 5, 2)
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert iterations == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_two_identical_launches_in_the_same_second_get_a_run_directory_each(tmp_path: Path) -> None:
    """Issue 30 item 1: two launches of the same command started together plan the same directory
    (the launch time, to the second); each must claim its own -- one progress.jsonl per run, one
    pid per rank log -- instead of both training into one. When the two planned different seconds
    anyway (they start together, but plan a second or two later), the pair is tried again, started
    half a second later in the second."""
    environment = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    for attempt, start_at in enumerate((0.0, 0.5, 0.25)):
        log_dir = tmp_path / f"attempt{attempt}"
        command = [*ISLAB_TRAIN, "--lib", "rsl_rl", "--device", "cpu", "--nproc", "1", "--num-envs", "16",
                   "--max-iterations", "2", "--log-dir", str(log_dir)]  # fmt: skip
        while abs(time.time() % 1 - start_at) > 0.02:
            time.sleep(0.005)
        launches = [
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
            for _ in range(2)
        ]
        results = [(launch.communicate(timeout=600), launch.returncode) for launch in launches]
        for (out, err), code in results:
            assert code == 0, out[-2000:] + err[-3000:]
        run_dirs = [Path(re.search(r"run directory: (\S+)", err).group(1)) for (_, err), _ in results]
        assert run_dirs[0] != run_dirs[1], f"both launches trained in {run_dirs[0]}"
        first, second = sorted(run_dirs)
        if second.name != f"{first.name}-2":
            continue  # they planned different seconds: no collision to check
        for run_dir in run_dirs:
            progress = (run_dir / "progress.jsonl").read_text().splitlines()
            iterations = [json.loads(line)["iteration"] for line in progress]
            assert iterations == [1, 2], (run_dir, iterations)
            pids = re.findall(r"pid=(\d+)", (run_dir / "logs" / "rank_0.log").read_text())
            assert len(pids) == 1, (run_dir, pids)
        return
    pytest.fail("three pairs of launches never planned the same second, so the collision was not tested")


@pytest.mark.slow
def test_elastic_restart_resumes_from_the_latest_checkpoint(tmp_path: Path) -> None:
    crash_once_after_iteration_3 = {
        "ISLAB_TEST_CRASH_RANK": "1",
        "ISLAB_TEST_CRASH_AT_ITERATION": "3",
        "ISLAB_TEST_CRASH_ONCE": "1",
    }
    result = launch(
        tmp_path, "rsl_rl", "torch", "--max-restarts", "1", "--checkpoint-interval", "2",
        "--max-iterations", "5", env=crash_once_after_iteration_3,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = the_run_dir(tmp_path, "rsl_rl")
    summary = summary_of(run_dir)
    assert summary["iteration"] == 5 and summary["start_iteration"] == 2  # resumed from iteration 2
    assert (run_dir / ".fault-injected-rank1").exists()
    digests = {json.loads((run_dir / "digests" / f"rank_{r}.json").read_text())["policy_sha256"] for r in (0, 1)}
    assert len(digests) == 1


@pytest.mark.slow
def test_total_env_steps_trains_the_ceiling_of_the_budget_over_all_ranks(tmp_path: Path) -> None:
    # one iteration of 2 ranks x 64 envs x 8 steps (the override) is 1024 env steps: 3000 -> 3 iterations
    budget, per_iteration = 3000, 2 * 64 * 8
    expected = -(-budget // per_iteration)
    result = launch(tmp_path, "rsl_rl", "torch", "num_steps_per_env=8", iterations=("--total-env-steps", str(budget)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = "--total-env-steps 3000 = 3 iterations × 2 ranks × 64 envs × 8 steps (3072 env steps)"
    assert f"islab-train: {line}" in result.stderr
    run_dir = the_run_dir(tmp_path, "rsl_rl")
    assert f"[islab] {line}" in (run_dir / "logs" / "rank_0.log").read_text()

    summary = summary_of(run_dir)
    assert summary["iterations"] == summary["iteration"] == expected == 3
    assert summary["env_steps"] == expected * per_iteration >= budget > (expected - 1) * per_iteration
    assert (summary["total_env_steps"], summary["world_size"]) == (budget, 2)
    records = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3] and {r["max_iterations"] for r in records} == {3}
    assert records[-1]["env_steps"] >= budget
