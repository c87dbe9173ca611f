from __future__ import annotations

import pytest

from islab.worker.context import RankContext


def test_single_process_defaults() -> None:
    ctx = RankContext.from_environ("cpu", 7, environ={})
    assert (ctx.rank, ctx.world_size, ctx.launcher, ctx.device, ctx.backend) == (0, 1, "single", "cpu", "gloo")
    assert ctx.seed == 7 and ctx.is_main and not ctx.distributed


def test_torchrun_variables() -> None:
    environ = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    ctx = RankContext.from_environ("cpu", 10, environ=environ)
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size) == (3, 1, 4, 2)
    assert ctx.launcher == "torchrun" and ctx.distributed and not ctx.is_main
    assert ctx.seed == 13  # base seed + global rank, exactly once


def test_multi_node_skrl_jax_ranks_divide_the_cores_by_the_ranks_of_their_node() -> None:
    """islab-train's skrl-JAX launcher tells each rank how many ranks share its node; without it
    a rank of a 2-node x 2-rank job would take cores // 4 threads instead of cores // 2."""
    from islab.plan.skrl_jax import rank_envs
    from islab.spec.run_spec import RunSpec

    spec = RunSpec(
        lib="skrl", ml_framework="jax", nnodes=2, nproc_per_node=2, node_rank=1, coordinator_address="10.0.0.1:5555"
    )
    for _, local_rank, env in rank_envs(spec, 1, "10.0.0.1:5555"):
        ctx = RankContext.from_environ("cpu", 0, environ=env)
        assert (ctx.local_rank, ctx.world_size, ctx.local_world_size) == (local_rank, 4, 2)


def test_skrl_jax_launcher_variables() -> None:
    environ = {"JAX_RANK": "1", "JAX_LOCAL_RANK": "1", "JAX_WORLD_SIZE": "2"}
    ctx = RankContext.from_environ("cpu", 0, environ=environ)
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.launcher) == (1, 1, 2, "skrl-jax")
    assert ctx.seed == 1


def test_cuda_without_gpu_is_a_clear_error() -> None:
    import torch

    if torch.cuda.is_available():
        ctx = RankContext.from_environ("cuda", 0, environ={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
        assert ctx.device == "cuda:0" and ctx.backend == "nccl"
    else:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            RankContext.from_environ("cuda", 0, environ={})


def test_cpu_threads_share_the_cores_unless_told() -> None:
    import os

    from islab.worker.context import cpu_threads_per_rank

    cores = os.cpu_count() or 1
    assert cpu_threads_per_rank(1, environ={}) == cores
    assert cpu_threads_per_rank(cores * 2, environ={}) == 1
    assert cpu_threads_per_rank(1, environ={"ISLAB_THREADS_PER_RANK": "3"}) == 3


def test_each_local_rank_takes_its_own_gpu() -> None:
    from islab.worker.context import cuda_device_for

    four = [cuda_device_for(r, 4, "torchrun", rank=r, local_world_size=4) for r in range(4)]
    assert four == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert cuda_device_for(1, 2, "skrl-jax", rank=1, local_world_size=2) == "cuda:1"


def test_the_only_rank_of_a_node_with_one_visible_gpu_takes_cuda_0() -> None:
    """A launcher that starts one rank per node and binds it one GPU (SLURM --gpus-per-task)."""
    from islab.worker.context import cuda_device_for

    assert cuda_device_for(0, 1, "torchrun", rank=7, local_world_size=1) == "cuda:0"


def test_one_visible_gpu_for_two_ranks_of_a_node_is_an_error_naming_the_rank(monkeypatch) -> None:
    """torchrun by hand with CUDA_VISIBLE_DEVICES=0 (or a MIG node showing one instance) and two
    ranks per node: the second rank must not silently share cuda:0 with the first."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    rank0 = {"RANK": "4", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert RankContext.from_environ("cuda", 0, environ=rank0).device == "cuda:0"
    rank1 = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    with pytest.raises(RuntimeError, match=r"rank 5 \(local rank 1 of 2 on this node\).* sees 1 CUDA device"):
        RankContext.from_environ("cuda", 0, environ=rank1)


@pytest.mark.parametrize(
    ("local_rank", "visible", "launcher"),
    [
        (2, 2, "torchrun"),  # hand-started torchrun with more ranks than GPUs
        (4, 3, "single"),  # CUDA_VISIBLE_DEVICES naming GPUs that are absent
        (1, 1, "skrl-jax"),  # JAX picks its GPU by local rank: never share cuda:0
    ],
)
def test_a_rank_never_silently_shares_a_gpu(local_rank: int, visible: int, launcher: str) -> None:
    from islab.worker.context import cuda_device_for

    with pytest.raises(RuntimeError, match=rf"rank 5 \(local rank {local_rank} of 8 .* sees {visible} CUDA device"):
        cuda_device_for(local_rank, visible, launcher, rank=5, local_world_size=8)


def test_resolve_device_reads_the_runtime_count_and_the_rank() -> None:
    from islab.worker.context import resolve_device

    assert resolve_device("cpu", 3) == "cpu"
    assert resolve_device("cuda:1", 0) == "cuda:1"  # an explicit device is taken as given
    assert resolve_device("cuda", 1, "torchrun", visible=2, rank=3) == "cuda:1"
    with pytest.raises(RuntimeError, match=r"rank 3 \(local rank 2 of 3 "):
        resolve_device("cuda", 2, "torchrun", visible=2, rank=3, local_world_size=3)
