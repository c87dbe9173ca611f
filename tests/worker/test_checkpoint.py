"""islab.worker.checkpoint on its own: RNG capture/restore, the compatibility check, rank 0 reading for
everyone (non-zero ranks never touch the path), atomic latest.pt, history pruning, byte
collectives over a real two-rank gloo group."""

from __future__ import annotations

import io
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from islab.rundir import resume_source as resolve_resume_path
from islab.worker.checkpoint import (
    FORMAT,
    Checkpointer,
    CheckpointError,
    capture_rng,
    check_compatible,
    identity,
    load_checkpoint_for_rank,
    restore,
    restore_rng,
    to_bytes,
    to_cpu,
)
from islab.worker.collectives import SingleProcess, TorchCollective
from islab.worker.context import RankContext

TASK = "Islab-Cartpole-v0"
RSL = identity("rsl_rl", "torch", TASK, (4,), (1,))


class FakeCollective:
    """Rank ``rank`` of a job whose rank 0 sent ``payload``; records what this rank sent."""

    def __init__(self, rank: int, payload: bytes | None = None) -> None:
        self.rank, self.world_size = rank, 2
        self.payload = payload
        self.sent: list[bytes | None] = []

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        self.sent.append(data)
        return data if self.rank == 0 else self.payload

    def gather_bytes(self, data: bytes) -> list[bytes] | None:
        return [data, data] if self.rank == 0 else None


def draws(generator: torch.Generator) -> tuple:
    return (
        torch.rand(3).tolist(),
        np.random.rand(3).tolist(),
        np.random.randn(),  # leaves a cached gaussian in numpy's state
        random.random(),
        torch.rand(3, generator=generator).tolist(),
    )


def test_rng_round_trip_through_weights_only_bytes() -> None:
    generator = torch.Generator().manual_seed(5)
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.randn()
    state = torch.load(io.BytesIO(to_bytes(capture_rng(generator))), weights_only=True)  # as from a file
    expected = draws(generator)
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    generator.manual_seed(99)
    assert draws(generator) != expected
    restore_rng(state, generator)
    assert draws(generator) == expected


def test_a_checkpoint_from_another_device_resumes_on_cpu_without_touching_cuda(monkeypatch) -> None:
    """Issue 14.16, CPU-only: the env generator state is saved as a GPU run saves it (a CUDA
    Philox state, 16 bytes, device cuda:0); resuming on CPU goes on from a seed derived from it
    (deterministic) instead of crashing, and a CPU run never reads or sets torch.cuda RNG state."""

    def no_cuda(*_: object) -> None:
        raise AssertionError("a CPU run touched torch.cuda RNG state")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", no_cuda)
    monkeypatch.setattr(torch.cuda, "set_rng_state", no_cuda)
    generator = torch.Generator().manual_seed(5)
    state = capture_rng(generator)
    assert state["cuda"] is None and state["device"] == "cpu"
    from_gpu = {**state, "device": "cuda:0", "cuda": torch.zeros(16, dtype=torch.uint8),
                "env": torch.arange(16, dtype=torch.uint8)}  # fmt: skip
    from_gpu = torch.load(io.BytesIO(to_bytes(from_gpu)), weights_only=True)
    restore_rng(from_gpu, generator)
    first = draws(generator)
    restore_rng(from_gpu, generator)
    assert draws(generator) == first  # the same checkpoint gives the same stream
    with pytest.raises(CheckpointError, match="env generator state saved on cpu does not fit"):
        restore_rng({**from_gpu, "device": "cpu"}, generator)  # a broken state of the same kind: clear error


def test_checkpoint_tensors_are_device_free() -> None:
    nested = {"a": [torch.ones(2)], "b": (torch.zeros(1), 3), "c": {"d": torch.ones(1, requires_grad=True)}}
    moved = to_cpu(nested)
    assert moved["b"][1] == 3 and isinstance(moved["b"], tuple)
    assert all(t.device.type == "cpu" and not t.requires_grad for t in (moved["a"][0], moved["b"][0], moved["c"]["d"]))


def test_compatible_checkpoint_passes_and_others_are_refused_clearly() -> None:
    checkpoint = {"format": FORMAT, **RSL}
    check_compatible(checkpoint, identity("rsl_rl", "torch", TASK, [4], [1]), "ck.pt")
    with pytest.raises(CheckpointError) as error:
        check_compatible(checkpoint, identity("rl_games", "torch", TASK, (4,), (1,)), "/runs/a/ck.pt")
    assert str(error.value) == (
        f"resume: checkpoint /runs/a/ck.pt was written by rsl_rl for {TASK} (obs 4, act 1); this run is "
        f"rl_games for {TASK} (obs 4, act 1). Start a new run or resume with the same --lib/--task."
    )
    with pytest.raises(CheckpointError, match=r"obs 4, act 1\); this run is rsl_rl .*\(obs 6, act 2\)"):
        check_compatible(checkpoint, identity("rsl_rl", "torch", TASK, (6,), (2,)), "ck.pt")
    with pytest.raises(CheckpointError, match=r"this run is skrl \(jax\)"):
        check_compatible(checkpoint, identity("skrl", "jax", TASK, (4,), (1,)), "ck.pt")
    with pytest.raises(CheckpointError, match="is not an islab checkpoint"):
        check_compatible({"actor_state_dict": {}}, RSL, "model_3.pt")


def test_rank0_reads_a_run_directory_and_ships_the_bytes(tmp_path: Path) -> None:
    checkpoint = {"format": FORMAT, "iteration": 4, "weights": torch.arange(3.0)}
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest.pt").write_bytes(to_bytes(checkpoint))
    rank0 = FakeCollective(rank=0)
    loaded, source = load_checkpoint_for_rank(rank0, tmp_path)  # a run directory: its latest.pt
    assert source == str(tmp_path / "checkpoints" / "latest.pt")
    assert loaded["iteration"] == 4 and torch.equal(loaded["weights"], torch.arange(3.0))

    # Rank 1 gets exactly what rank 0 sent, and never looks at the path: it does not exist
    # there, and reading is made to fail loudly if anyone tries.
    def no_reading(path: Path) -> bytes:
        raise AssertionError(f"rank 1 read {path}")

    rank1 = FakeCollective(rank=1, payload=rank0.sent[0])
    loaded1, source1 = load_checkpoint_for_rank(rank1, tmp_path / "not-on-this-node", read=no_reading)
    assert rank1.sent == [None]  # a non-zero rank contributes nothing to the broadcast
    assert source1 == source and loaded1["iteration"] == 4


def test_rank0_errors_reach_every_rank(tmp_path: Path) -> None:
    rank0 = FakeCollective(rank=0)
    with pytest.raises(CheckpointError, match="there is no checkpoint at"):
        load_checkpoint_for_rank(rank0, tmp_path / "missing.pt")
    rank1 = FakeCollective(rank=1, payload=rank0.sent[0])
    with pytest.raises(CheckpointError, match="there is no checkpoint at"):
        load_checkpoint_for_rank(rank1, None)

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint_for_rank(SingleProcess(), garbage)


def test_missing_ok_returns_none_on_every_rank(tmp_path: Path) -> None:
    rank0 = FakeCollective(rank=0)
    assert load_checkpoint_for_rank(rank0, tmp_path / "checkpoints" / "latest.pt", missing_ok=True)[0] is None
    rank1 = FakeCollective(rank=1, payload=rank0.sent[0])
    assert load_checkpoint_for_rank(rank1, None, missing_ok=True)[0] is None


def test_resolve_resume_path(tmp_path: Path) -> None:
    assert resolve_resume_path(tmp_path) == tmp_path / "checkpoints" / "latest.pt"
    assert resolve_resume_path(tmp_path / "iter_4.pt") == tmp_path / "iter_4.pt"


class TinyAdapter:
    """Just what Checkpointer.write reads from an adapter."""

    def __init__(self) -> None:
        self.env = type("Env", (), {"generator": torch.Generator().manual_seed(0)})()
        self.weights = torch.zeros(2)
        self.job_env_steps = 0

    def extra_rng_state(self) -> dict:
        return {}

    def rank_state(self) -> dict:
        return {"env": {}, "episodes": {}}

    def policy_state(self) -> dict:
        return {"w": self.weights}

    def library_state(self) -> dict:
        return {"w": self.weights.clone()}


def test_checkpointer_interval_history_and_latest(tmp_path: Path) -> None:
    checkpointer = Checkpointer(SingleProcess(), tmp_path, RSL, {"max_iterations": 7}, interval=2, keep=2)
    adapter = TinyAdapter()
    for iteration in range(1, 8):
        adapter.weights = torch.full((2,), float(iteration))
        checkpointer.on_iteration(adapter, iteration, final_iteration=7)
    directory = tmp_path / "checkpoints"
    assert sorted(p.name for p in directory.iterdir()) == ["iter_6.pt", "iter_7.pt", "latest.pt"]
    latest = torch.load(directory / "latest.pt", weights_only=True)
    assert latest["iteration"] == 7 and latest["format"] == FORMAT and latest["lib"] == "rsl_rl"
    assert torch.equal(latest["library"]["w"], torch.full((2,), 7.0))
    assert latest["rng"]["world_size"] == 1 and len(latest["rng"]["ranks"]) == 1
    assert torch.load(directory / "iter_6.pt", weights_only=True)["iteration"] == 6


class LoadingAdapter(TinyAdapter):
    """What ``restore`` calls; ``load_scale`` stands in for a library version that reads the
    saved state into another policy than the one saved."""

    def __init__(self, load_scale: float = 1.0) -> None:
        super().__init__()
        self.load_scale = load_scale
        self.iteration = 0

    def load_library_state(self, state: dict) -> None:
        self.weights = state["w"] * self.load_scale

    def load_extra_rng_state(self, state: dict) -> None:
        pass

    def load_rank_state(self, state: dict) -> bool:
        return False


def test_restore_checks_the_loaded_policy_against_the_saved_digest(tmp_path: Path) -> None:
    saved = LoadingAdapter()
    saved.weights = torch.tensor([1.0, 2.0])
    Checkpointer(SingleProcess(), tmp_path, RSL, {}).write(saved, 3)
    checkpoint = torch.load(tmp_path / "checkpoints" / "latest.pt", weights_only=True)

    resumed = LoadingAdapter()
    assert restore(resumed, checkpoint, rank=0) == checkpoint["policy_sha256"]
    assert resumed.iteration == 3 and torch.equal(resumed.weights, saved.weights)
    with pytest.raises(CheckpointError, match=r"the policy loaded from the checkpoint \(sha256 \w{12}\) differs"):
        restore(LoadingAdapter(load_scale=2.0), checkpoint, rank=0)


# A checkpoint big enough that writing latest.pt in place (truncate, then write) takes long
# enough to be caught in the act: 32 MB of weights, ~20 ms to write from the page cache.
BIG = 8_000_000


def _write_iterations_1_and_2(directory: Path, written_1, go) -> None:
    """The writer process: iteration 1, then (on ``go``) iteration 2, then wait to be killed."""
    checkpointer = Checkpointer(SingleProcess(), directory, RSL, {}, interval=1)
    adapter = TinyAdapter()
    adapter.weights = torch.full((BIG,), 1.0)
    checkpointer.write(adapter, 1)
    written_1.set()
    go.wait()
    adapter.weights = torch.full((BIG,), 2.0)
    checkpointer.write(adapter, 2)
    time.sleep(120)  # SIGKILLed long before


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def test_latest_survives_a_writer_killed_mid_swap(tmp_path: Path) -> None:
    """A real writer process is SIGKILLed the moment latest.pt starts to change while it replaces
    it with iteration 2 (a truncated, half-written or missing file is what an in-place write leaves
    then): what is left at latest.pt must load whole, as iteration 1 or 2."""
    # spawn, not fork: a fork of the test process copies whatever locks its threads held then (an
    # earlier test's Ray session, torch's pools), and the child can wait on them forever.
    spawn = mp.get_context("spawn")
    written_1, go = spawn.Event(), spawn.Event()
    writer = spawn.Process(target=_write_iterations_1_and_2, args=(tmp_path, written_1, go), daemon=True)
    writer.start()
    try:
        assert written_1.wait(60), "the writer did not write iteration 1"
        latest = tmp_path / "checkpoints" / "latest.pt"
        before = _file_state(latest)
        assert before is not None
        go.set()
        deadline = time.monotonic() + 60
        while _file_state(latest) == before:  # busy: the kill must land while the swap is under way
            assert writer.is_alive() and time.monotonic() < deadline, "latest.pt was never replaced"
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(30)
    finally:
        if writer.is_alive():
            writer.kill()
    assert writer.exitcode == -signal.SIGKILL  # killed, not finished
    try:
        checkpoint = torch.load(latest, weights_only=True)
    except Exception as error:  # what an in-place write leaves: empty, truncated, half a zip
        pytest.fail(f"latest.pt is not whole after its writer was killed mid-swap: {error!r}")
    iteration = checkpoint["iteration"]
    assert iteration in (1, 2)
    assert torch.equal(checkpoint["library"]["w"], torch.full((BIG,), float(iteration)))


def _collective_rank(rank: int, store: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        ctx = RankContext(rank, rank, 2, 2, "cpu", "gloo", 0, "torchrun")
        collective = TorchCollective(ctx)
        received = collective.broadcast_bytes(b"checkpoint bytes \x00\xff" * 100 if rank == 0 else None)
        gathered = collective.gather_bytes(bytes([rank]) * (10 + rank))  # different lengths
        results[rank] = (received, gathered)
    finally:
        dist.destroy_process_group()


def test_torch_collective_moves_bytes_between_two_gloo_ranks(tmp_path: Path) -> None:
    store = tmp_path / "store"  # a file store: no port probed here and bound later by a child
    results = mp.Manager().dict()
    mp.start_processes(_collective_rank, args=(str(store), results), nprocs=2, join=True, start_method="fork")
    expected = b"checkpoint bytes \x00\xff" * 100
    assert results[0][0] == expected and results[1][0] == expected
    assert results[0][1] == [b"\x00" * 10, b"\x01" * 11]
    assert results[1][1] is None
