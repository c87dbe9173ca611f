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

    assert [cuda_device_for(r, 4, "torchrun", rank=r) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert cuda_device_for(1, 2, "skrl-jax", rank=1) == "cuda:1"


def test_one_visible_gpu_per_rank_is_cuda_0() -> None:
    """A launcher that binds one GPU to each rank (SLURM --gpus-per-task) leaves each rank one."""
    from islab.worker.context import cuda_device_for

    assert cuda_device_for(3, 1, "torchrun", rank=7) == "cuda:0"


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

    with pytest.raises(RuntimeError, match=rf"rank 5 \(local rank {local_rank}\).* sees {visible} CUDA device"):
        cuda_device_for(local_rank, visible, launcher, rank=5)


def test_resolve_device_reads_the_runtime_count_and_the_rank() -> None:
    from islab.worker.context import resolve_device

    assert resolve_device("cpu", 3) == "cpu"
    assert resolve_device("cuda:1", 0) == "cuda:1"  # an explicit device is taken as given
    assert resolve_device("cuda", 1, "torchrun", visible=2, rank=3) == "cuda:1"
    with pytest.raises(RuntimeError, match=r"rank 3 \(local rank 2\)"):
        resolve_device("cuda", 2, "torchrun", visible=2, rank=3)
