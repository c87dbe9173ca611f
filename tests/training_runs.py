"""Launching real training runs from tests: the four library paths and one CPU launch helper.

Shared by the end-to-end, task, environment and resume tests; each test names what it checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env

ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]

# The four library paths, skrl-JAX only where jax is installed (failed, not skipped, under CI=true).
PATHS = [
    pytest.param("rsl_rl", "torch", id="rsl_rl"),
    pytest.param("rl_games", "torch", id="rl_games"),
    pytest.param("skrl", "torch", id="skrl-torch"),
    pytest.param("skrl", "jax", id="skrl-jax", marks=pytest.mark.needs("jax")),
]


def launch(
    tmp_path: Path,
    lib: str,
    ml_framework: str,
    *extra: str,
    env: dict[str, str] | None = None,
    iterations: tuple[str, ...] = ("--max-iterations", "3"),
):
    command = [
        *ISLAB_TRAIN,
        "--lib", lib,
        "--ml-framework", ml_framework,
        "--device", "cpu",
        "--nproc", "2",
        "--num-envs", "64",
        *iterations,
        "--log-dir", str(tmp_path / "logs"),
        "--run-name", "e2e",
        *extra,
    ]  # fmt: skip
    environment = child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    environment.update(env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)


# One tiny 1-rank CPU run per library path (64 envs, 2 iterations, a checkpoint after each), shared by
# the tests that only read a trained run (conftest's ``one_rank_run``: play/export, TensorBoard
# events). rsl_rl trains with its observation normalizer on (off in the Cartpole config), so an export
# that forgets the normalizer shows for every library.
ONE_RANK_OVERRIDES = {"rsl_rl": ("actor.obs_normalization=true",)}


def train_one_rank(log_dir: Path, lib: str, ml_framework: str) -> Path:
    """Train the shared 1-rank run of ``lib``/``ml_framework`` under ``log_dir``; its run directory."""
    command = [
        *ISLAB_TRAIN, "--lib", lib, "--ml-framework", ml_framework, "--device", "cpu", "--nproc", "1",
        "--num-envs", "64", "--max-iterations", "2", "--checkpoint-interval", "1", "--log-dir", str(log_dir),
        *ONE_RANK_OVERRIDES.get(lib, ()),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=child_env(("ISLAB_", "RANK", "WORLD_SIZE"))
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run_dir,) = log_dir.glob("*/*/*")
    return run_dir


def summary_table(output: str) -> dict[str, str]:
    """The rows of the end-of-run table as printed (a long value folds onto the next lines)."""
    rows: dict[str, str] = {}
    label = None
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.replace("|", "│").split("│")[1:-1]]
        if len(cells) == 2 and cells[0]:
            label, rows[cells[0]] = cells[0], cells[1]
        elif len(cells) == 2 and label is not None:
            rows[label] += cells[1]
    return rows


def env_generator_at_start(run_dir: Path, rank: int) -> str:
    prefix = f"[islab] rank {rank} env generator at start: "
    log = (run_dir / "logs" / f"rank_{rank}.log").read_text()
    (line,) = [line for line in log.splitlines() if line.startswith(prefix)]
    return line.removeprefix(prefix)


def policy_digests(run_dir: Path, ranks: tuple[int, ...] = (0, 1)) -> list[str]:
    """Each rank's final policy digest (``digests/rank_<R>.json``), in rank order."""
    return [json.loads((run_dir / "digests" / f"rank_{rank}.json").read_text())["policy_sha256"] for rank in ranks]


def check_two_ranks_hold_one_policy(run_dir: Path, output: str, iterations: int, ml_framework: str) -> None:
    """What every 2-rank CPU run through the launcher must leave: both rank logs, rank 0's
    TensorBoard events, a summary of ``iterations`` on 2 ranks naming a loadable islab checkpoint
    (in summary.json and the printed table) beside the library's own, and the same policy on both
    ranks, reached from envs seeded apart."""
    import torch

    assert (run_dir / "logs" / "rank_0.log").is_file() and (run_dir / "logs" / "rank_1.log").is_file()
    assert list(run_dir.rglob("events.out.tfevents*")), "rank 0 wrote no TensorBoard events"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["iterations"] == iterations
    checkpoint = Path(summary["checkpoint"])
    assert checkpoint.is_file() and checkpoint.is_relative_to(run_dir)
    # summary.json and the summary table name the same islab checkpoint (issue 14 item 14); the
    # library's own file is under its own key
    assert checkpoint.parent == run_dir / "checkpoints", summary
    assert summary_table(output)["checkpoint"] == str(checkpoint)
    assert Path(summary["library_checkpoint"]).is_file() and summary["library_checkpoint"] != summary["checkpoint"]
    if ml_framework == "torch":
        torch.load(checkpoint, map_location="cpu", weights_only=True)

    digests = policy_digests(run_dir)
    assert digests[0] == digests[1], "the two ranks ended with different policies"
    # ... from envs seeded apart (seed + rank): the env generators differ before the first step
    starts = [env_generator_at_start(run_dir, rank) for rank in (0, 1)]
    assert starts[0] != starts[1], f"both ranks' envs started from the same generator state {starts[0]}"
