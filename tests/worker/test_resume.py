"""Resume, for each of the four library paths: train N iterations with islab checkpoints on, load
the checkpoint into a freshly built adapter of another seed, train M more.

What must hold: the resumed policy is the checkpoint's before any update (digest right after
loading == digest stored); the library state reads back exactly (optimizer, normalizers,
counters, learning rate); the iteration counter goes N -> N+M in progress.jsonl, the islab
checkpoint and the library's own counter. Then the worker itself: a mismatched --resume exits 2
with a clear message, and two torchrun ranks resume a checkpoint that only rank 0 reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from adapters import TASK, build_adapter
from child_env import child_env
from ports import port_for_a_child
from prerequisites import AS_ROOT_IN_CI, require
from training_runs import ONE_RANK_OVERRIDES, PATHS

from islab.libs.base import LibraryAdapter, state_digest
from islab.worker.checkpoint import Checkpointer, identity, load_checkpoint_for_rank, restore
from islab.worker.collectives import SingleProcess

N, M = 2, 2


in_process_skrl_ok = int(os.environ.get("WORLD_SIZE", "1")) == 1 and int(os.environ.get("JAX_WORLD_SIZE", "1")) == 1


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: on this shared 2-core machine two made the same run many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(lib: str, framework: str, run_dir: Path, seed: int) -> LibraryAdapter:
    run_dir.mkdir(parents=True, exist_ok=True)
    adapter = build_adapter(lib, run_dir, framework=framework, num_envs=64, seed=seed)
    adapter.checkpointer = Checkpointer(
        SingleProcess(), run_dir, identity(lib, framework, TASK, (4,), (1,)), {"lib": lib}, interval=1
    )
    return adapter


def assert_same_tree(left: Any, right: Any, where: str = "library") -> None:
    """Equal structure, equal tensors bit for bit, equal plain values."""
    if isinstance(left, dict):
        assert isinstance(right, dict) and left.keys() == right.keys(), where
        for key in left:
            assert_same_tree(left[key], right[key], f"{where}.{key}")
    elif isinstance(left, (list, tuple)):
        assert isinstance(right, (list, tuple)) and len(left) == len(right), where
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_same_tree(a, b, f"{where}[{index}]")
    elif isinstance(left, torch.Tensor):
        assert torch.equal(left.cpu(), right.cpu()), where
    else:
        assert left == right, where


def progress_iterations(run_dir: Path) -> list[tuple[int, int]]:
    lines = (run_dir / "progress.jsonl").read_text().splitlines()
    return [(record["iteration"], record["max_iterations"]) for record in map(json.loads, lines)]


def library_iteration(adapter: LibraryAdapter) -> int:
    """The library's own counter, in completed iterations."""
    if adapter.name == "rsl_rl":
        return adapter.runner.current_learning_iteration + 1  # rsl_rl keeps the last 0-based index
    if adapter.name == "rl_games":
        return adapter.agent.epoch_num
    # skrl: the resume offset plus the updates skrl ran in this process (one per `rollouts` steps)
    return (adapter.agent.timestep_offset + adapter.agent._rollout) // adapter.steps_per_iteration


@pytest.mark.skipif(not in_process_skrl_ok, reason="importing skrl inside a distributed launch joins its group")
@pytest.mark.parametrize(("lib", "framework"), PATHS)
def test_resume_continues_from_the_checkpoint(tmp_path: Path, lib: str, framework: str, one_torch_thread) -> None:
    first = build(lib, framework, tmp_path / "first", seed=1)
    first.train(N)
    assert first.iteration == N and library_iteration(first) == N
    assert progress_iterations(tmp_path / "first") == [(1, N), (2, N)]

    checkpoint, source = load_checkpoint_for_rank(SingleProcess(), tmp_path / "first")  # a run directory
    assert source == str(tmp_path / "first" / "checkpoints" / "latest.pt")
    assert checkpoint["iteration"] == N and checkpoint["lib"] == lib and checkpoint["ml_framework"] == framework
    assert checkpoint["policy_sha256"] == state_digest(first.policy_state())

    second = build(lib, framework, tmp_path / "second", seed=7)
    assert state_digest(second.policy_state()) != checkpoint["policy_sha256"], "a different seed must differ"
    digest = restore(second, checkpoint, rank=0)
    # The resumed policy is the checkpoint's before the first update, and so is everything else.
    assert digest == checkpoint["policy_sha256"] == state_digest(second.policy_state())
    assert second.iteration == N
    assert_same_tree(second.library_state(), checkpoint["library"])

    result = second.train(M)
    assert result.iterations == M
    assert second.iteration == N + M and library_iteration(second) == N + M
    assert progress_iterations(tmp_path / "second") == [(N + 1, N + M), (N + 2, N + M)]
    latest = torch.load(tmp_path / "second" / "checkpoints" / "latest.pt", weights_only=True)
    assert latest["iteration"] == N + M
    assert state_digest(second.policy_state()) != digest, "training went on from the checkpoint"


def test_resume_restores_rsl_rl_learning_rate_and_optimizer(tmp_path: Path, one_torch_thread) -> None:
    """The adaptive learning rate lives outside the optimizer's state dict in rsl_rl."""
    first = build("rsl_rl", "torch", tmp_path / "first", seed=1)
    first.train(N)
    checkpoint, _ = load_checkpoint_for_rank(SingleProcess(), tmp_path / "first")
    second = build("rsl_rl", "torch", tmp_path / "second", seed=7)
    restore(second, checkpoint, rank=0)
    assert second.runner.alg.learning_rate == first.runner.alg.learning_rate != 1.0e-3  # adapted, not the default
    state = second.runner.alg.optimizer.state_dict()["state"]
    assert int(state[0]["step"]) == int(first.runner.alg.optimizer.state_dict()["state"][0]["step"]) > 0


# -- the worker --------------------------------------------------------------------------------


def worker_env() -> dict[str, str]:
    env = child_env(("ISLAB_", "RANK", "WORLD_SIZE", "TORCHELASTIC"))
    env["ISLAB_THREADS_PER_RANK"] = "1"
    return env


def worker(*args: str, torchrun: int = 0, wrapper: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The worker on its own, or ``torchrun`` ranks of it (``--standalone``: torchrun binds a free
    port itself, no port probed here and bound later). ``wrapper``: a command each rank runs the
    worker through (torchrun ``--no-python``)."""
    launcher = [sys.executable, "-m", "islab.worker"]
    if torchrun:
        head = ["--no-python", *wrapper, sys.executable, "-m", "islab.worker"] if wrapper else ["-m", "islab.worker"]
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(torchrun),
                    *head, "--distributed"]  # fmt: skip
    common = ["--task", TASK, "--num-envs", "64", "--device", "cpu"]
    return subprocess.run([*launcher, *common, *args], capture_output=True, text=True, timeout=300, env=worker_env())


# Ranks other than 0 run in a mount namespace of their own, where the directory $1 is an empty
# tmpfs: on "their node" the checkpoint does not exist, as on a cluster without a shared file
# system, while rank 0 and the rest of the file system (the new run directory) are shared.
HIDE_FROM_OTHER_RANKS = """
hidden=$1; shift
if [ "${{RANK:-$JAX_RANK}}" != 0 ]; then  # torchrun sets RANK, the JAX ranks JAX_RANK
    exec {unshare} --mount --propagation private -- sh -c \\
        'mount -t tmpfs -o size=1m islab-hidden "$0" && [ -z "$(ls -A "$0")" ] && exec "$@"' "$hidden" "$@"
fi
exec "$@"
"""


def hiding_unshare(probe_dir: Path) -> list[str] | None:
    """The ``unshare`` that lets a process mount a tmpfs over a directory of ours in a mount
    namespace of its own: plain as root, with a user namespace (mapped to root) otherwise."""
    if shutil.which("unshare") is None:
        return None
    probe_dir.mkdir()
    (probe_dir / "visible").touch()
    for unshare in (["unshare"], ["unshare", "--map-root-user"]):
        script = 'mount -t tmpfs none "$0" && [ ! -e "$0/visible" ]'
        done = subprocess.run([*unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script,
                               str(probe_dir)], capture_output=True, timeout=30)  # fmt: skip
        if done.returncode == 0:
            return unshare
    return None


def wait_for_ranks(ranks: list[subprocess.Popen], timeout_s: float) -> list[int | None]:
    """Every rank's exit code; when one fails, the others are killed (a JAX rank whose peer died
    waits for it forever), and so are all after ``timeout_s`` (None: killed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(rank.poll() is None for rank in ranks):
        if any(rank.poll() not in (None, 0) for rank in ranks):
            break
        time.sleep(0.5)
    codes = [rank.poll() for rank in ranks]
    for rank in ranks:
        rank.kill()  # SIGKILL: the worker takes SIGTERM as a preemption
        rank.wait()
    return codes


def test_worker_refuses_a_checkpoint_of_another_library(tmp_path: Path) -> None:
    adapter = build("rsl_rl", "torch", tmp_path / "rsl", seed=1)
    adapter.checkpointer.write(adapter, 1)
    done = worker("--lib", "rl_games", "--max-iterations", "1", "--run-dir", str(tmp_path / "rlg"),
                  "--resume", str(tmp_path / "rsl"))  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    path = tmp_path / "rsl" / "checkpoints" / "latest.pt"
    assert (
        f"error: resume: checkpoint {path} was written by rsl_rl for {TASK} (obs 4, act 1); this run is rl_games "
        f"for {TASK} (obs 4, act 1). Start a new run or resume with the same --lib/--task."
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_worker_resume_of_a_missing_checkpoint_exits_2(tmp_path: Path) -> None:
    done = worker("--lib", "rsl_rl", "--max-iterations", "1", "--run-dir", str(tmp_path / "run"),
                  "--resume", str(tmp_path / "nowhere"))  # fmt: skip
    assert done.returncode == 2
    assert "error: resume: there is no checkpoint at" in done.stderr


@pytest.mark.slow  # the session's one 1-rank rsl_rl run (trained here when no other test did)
def test_a_resume_with_nothing_left_to_train_keeps_the_runs_records(tmp_path: Path, one_rank_run) -> None:
    """Issue 30 item 2, the rank's side: where the launcher could not tell that the run was done
    (its records were written by another launch), the rank resumes, trains nothing and leaves
    spec.yaml and summary.json as they were (they said 0 iterations before)."""
    run_dir = tmp_path / "run"
    shutil.copytree(one_rank_run("rsl_rl"), run_dir)
    kept = {name: (run_dir / name).read_bytes() for name in ("spec.yaml", "summary.json")}
    done = worker("--lib", "rsl_rl", "--run-dir", str(run_dir), "--resume", str(run_dir),
                  *ONE_RANK_OVERRIDES["rsl_rl"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming at iteration 2, training to 2 (already there" in done.stderr
    assert {name: (run_dir / name).read_bytes() for name in kept} == kept


@pytest.mark.slow
def test_two_torchrun_ranks_resume_what_rank0_reads(tmp_path: Path) -> None:
    """rsl_rl: 3 iterations in one process, then 2 ranks resume for 2 more. Rank 1 cannot see the
    checkpoint at all (its own mount namespace hides the first run's directory): it can only have
    it from rank 0's broadcast."""
    unshare = hiding_unshare(tmp_path / "probe")
    require(None if unshare else "cannot mount in a mount namespace here (unshare, root or user namespaces)",
            in_ci=AS_ROOT_IN_CI)  # fmt: skip
    first = worker("--lib", "rsl_rl", "--max-iterations", "3", "--run-dir", str(tmp_path / "first"),
                   "--checkpoint-interval", "2")  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    saved = torch.load(tmp_path / "first" / "checkpoints" / "latest.pt", weights_only=True)
    assert saved["iteration"] == 3  # the last iteration is always checkpointed

    run_dir = tmp_path / "second"
    hide = ("sh", "-c", HIDE_FROM_OTHER_RANKS.format(unshare=" ".join(unshare)), "hide", str(tmp_path / "first"))
    done = worker("--lib", "rsl_rl", "--max-iterations", "2", "--run-dir", str(run_dir),
                  "--resume", str(tmp_path / "first"), torchrun=2, wrapper=hide)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["start_iteration"], summary["iteration"], summary["iterations"]) == (3, 5, 2)
    assert summary["resumed"]["policy_sha256_loaded"] == saved["policy_sha256"]
    for rank in (0, 1):
        log = (run_dir / "logs" / f"rank_{rank}.log").read_text()
        assert f"rank {rank} resumed (resume)" in log and "equals the checkpoint's" in log
    progress = (run_dir / "progress.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in progress] == [4, 5]
    digests = {json.loads(p.read_text())["policy_sha256"] for p in run_dir.glob("digests/rank_*.json")}
    assert len(digests) == 1
    latest = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)
    assert latest["iteration"] == 5 and latest["rng"]["world_size"] == 2
    assert latest["spec"]["target_iteration"] == 5 and latest["spec"]["world_size"] == 2
    # Each rank's own RNG state was gathered: the env generators of rank 0 and 1 differ (seeds differ).
    ranks = latest["rng"]["ranks"]
    assert not torch.equal(ranks[0]["env"], ranks[1]["env"])
    assert not np.array_equal(ranks[0]["numpy"]["keys"].numpy(), ranks[1]["numpy"]["keys"].numpy())


@pytest.mark.slow
@pytest.mark.needs("jax")
def test_two_skrl_jax_ranks_resume_what_rank0_reads(tmp_path: Path) -> None:
    """skrl-JAX ranks have no torch process group: the checkpoint bytes and the RNG states travel
    through jax.experimental.multihost_utils instead. The two ranks are started as skrl's launcher
    starts them (its JAX_* variables), rank 1 in a mount namespace where the first run's directory
    is an empty tmpfs: it can only have the checkpoint from rank 0's broadcast."""
    from islab.worker import ENTRY_SCRIPT

    unshare = hiding_unshare(tmp_path / "probe")
    require(None if unshare else "cannot mount in a mount namespace here (unshare, root or user namespaces)",
            in_ci=AS_ROOT_IN_CI)  # fmt: skip
    first = worker("--lib", "skrl", "--ml-framework", "jax", "--max-iterations", "1",
                   "--run-dir", str(tmp_path / "first"))  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    port = port_for_a_child()
    run_dir = tmp_path / "second"
    program = [
        sys.executable, str(ENTRY_SCRIPT), "--lib", "skrl", "--ml-framework", "jax", "--task", TASK,
        "--num-envs", "64", "--device", "cpu", "--max-iterations", "1", "--run-dir", str(run_dir), "--distributed",
        "--resume", str(tmp_path / "first"),
    ]  # fmt: skip
    hide = ["sh", "-c", HIDE_FROM_OTHER_RANKS.format(unshare=" ".join(unshare)), "hide", str(tmp_path / "first")]
    ranks = []
    for rank in (0, 1):
        jax_env = {"JAX_RANK": str(rank), "JAX_LOCAL_RANK": str(rank), "JAX_WORLD_SIZE": "2",
                   "JAX_COORDINATOR_ADDR": "127.0.0.1", "JAX_COORDINATOR_PORT": str(port)}  # fmt: skip
        ranks.append(subprocess.Popen([*hide, *program], env={**worker_env(), **jax_env},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
    codes = wait_for_ranks(ranks, timeout_s=400)
    logs = [(run_dir / "logs" / f"rank_{rank}.log") for rank in (0, 1)]
    assert codes == [0, 0], "\n".join(log.read_text()[-3000:] for log in logs if log.is_file())
    assert json.loads((run_dir / "summary.json").read_text())["iteration"] == 2
    for rank in (0, 1):
        assert f"rank {rank} resumed (resume)" in (run_dir / "logs" / f"rank_{rank}.log").read_text()
    digests = {json.loads(p.read_text())["policy_sha256"] for p in run_dir.glob("digests/rank_*.json")}
    assert len(list(run_dir.glob("digests/rank_*.json"))) == 2 and len(digests) == 1
    latest = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)
    assert latest["iteration"] == 2 and latest["rng"]["world_size"] == 2


def test_resume_alone_finishes_the_original_target_and_a_length_with_it_says_how_many_more(
    tmp_path: Path, one_torch_thread
) -> None:
    """Issue 23 item 14, one rule: a run asked for 5 iterations and stopped after 2 (Ctrl-C) resumes
    to 5 with --resume alone (as a SLURM requeue does); --resume with --max-iterations 4 trains 4 more."""
    import argparse

    from islab.worker.__main__ import parse_args
    from islab.worker.resume import find_resume_point

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    adapter = build_adapter("rsl_rl", run_dir, framework="torch", num_envs=64, seed=1)
    run_identity = identity("rsl_rl", "torch", TASK, (4,), (1,))
    spec = {"lib": "rsl_rl", "target_iteration": 5}
    adapter.checkpointer = Checkpointer(SingleProcess(), run_dir, run_identity, spec, interval=1)
    adapter.train(2)

    def target(max_iterations: int | None) -> int:
        args = argparse.Namespace(
            resume=run_dir, max_iterations=max_iterations, run_dir=run_dir, scheduler_job=None, job_restart=None
        )
        point = find_resume_point(args, SingleProcess(), run_identity, {})
        assert point.checkpoint is not None and point.checkpoint["iteration"] == 2
        return point.target_iteration

    assert target(None) == 5 and target(4) == 6
    base = ["--lib", "rsl_rl", "--task", TASK, "--num-envs", "8", "--run-dir", str(run_dir)]
    assert parse_args([*base, "--resume", str(run_dir)]).max_iterations is None  # alone: the run's target
    with pytest.raises(SystemExit):
        parse_args(base)  # a new run needs a length
