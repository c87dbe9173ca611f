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
