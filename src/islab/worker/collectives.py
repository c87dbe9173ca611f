"""Moving bytes between the ranks of a job, whatever joined them.

Checkpoints are read by rank 0 only and broadcast, every rank's RNG state is gathered to rank 0,
and the ranks agree once per iteration whether to stop (:mod:`islab.worker.preemption`), so the
worker needs three collectives that work on every launcher path:

* torchrun ranks have a torch process group: a uint8 tensor over gloo (CPU) or NCCL (the tensors
  on the GPU);
* skrl-JAX ranks have no torch group, only ``jax.distributed``:
  ``jax.experimental.multihost_utils.broadcast_one_to_all`` / ``process_allgather``;
* a single process needs neither.

Every rank must call each operation together, in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

if TYPE_CHECKING:
    from islab.worker.context import RankContext


class Collective(Protocol):
    """The two byte-moving operations checkpoints need; every rank must call them together."""

    rank: int
    world_size: int

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        """Rank 0 passes ``data``; every rank returns rank 0's bytes."""
        ...

    def gather_bytes(self, data: bytes) -> list[bytes] | None:
        """Every rank passes its bytes; rank 0 returns them in rank order, others ``None``."""
        ...

    def max_int(self, value: int) -> int:
        """Every rank passes a number; every rank returns the largest."""
        ...


class SingleProcess:
    rank, world_size = 0, 1

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        assert data is not None
        return data

    def gather_bytes(self, data: bytes) -> list[bytes] | None:
        return [data]

    def max_int(self, value: int) -> int:
        return value


class TorchCollective:
    """Over the worker's torch process group (gloo on CPU; NCCL needs the tensors on the GPU)."""

    def __init__(self, ctx: RankContext) -> None:
        self.rank, self.world_size = ctx.rank, ctx.world_size
        self.device = torch.device(ctx.device if ctx.backend == "nccl" else "cpu")

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        import torch.distributed as dist

        size = torch.tensor([len(data) if self.rank == 0 else 0], dtype=torch.int64, device=self.device)
        dist.broadcast(size, src=0)
        if self.rank == 0:
            buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        else:
            buffer = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
        dist.broadcast(buffer, src=0)
        return data if self.rank == 0 else buffer.cpu().numpy().tobytes()

    def gather_bytes(self, data: bytes) -> list[bytes] | None:
        import torch.distributed as dist

        # all_gather rather than gather: NCCL and gloo both have it, and the payload is a few KiB.
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        sizes = [torch.empty_like(size) for _ in range(self.world_size)]
        dist.all_gather(sizes, size)
        longest = max(int(s.item()) for s in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        rows = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(rows, padded)
        if self.rank != 0:
            return None
        return [row[: int(s.item())].cpu().numpy().tobytes() for row, s in zip(rows, sizes, strict=True)]

    def max_int(self, value: int) -> int:
        import torch.distributed as dist

        number = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(number, op=dist.ReduceOp.MAX)
        return int(number.item())


class JaxCollective:
    """For skrl-JAX ranks (joined by ``jax.distributed``, no torch process group)."""

    def __init__(self, ctx: RankContext) -> None:
        self.rank, self.world_size = ctx.rank, ctx.world_size

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        from jax.experimental import multihost_utils

        # broadcast_one_to_all needs the same shape everywhere: the length first, then the bytes.
        size = np.array([len(data) if self.rank == 0 else 0], dtype=np.int64)
        size = int(np.asarray(multihost_utils.broadcast_one_to_all(size))[0])
        buffer = np.frombuffer(data, dtype=np.uint8) if self.rank == 0 else np.zeros(size, dtype=np.uint8)
        received = np.asarray(multihost_utils.broadcast_one_to_all(buffer))
        return data if self.rank == 0 else received.astype(np.uint8).tobytes()

    def gather_bytes(self, data: bytes) -> list[bytes] | None:
        from jax.experimental import multihost_utils

        sizes = np.asarray(multihost_utils.process_allgather(np.array([len(data)], dtype=np.int64))).reshape(-1)
        padded = np.zeros(int(sizes.max()), dtype=np.uint8)
        padded[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(self.world_size, -1)
        if self.rank != 0:
            return None
        return [rows[r, : int(sizes[r])].astype(np.uint8).tobytes() for r in range(self.world_size)]

    def max_int(self, value: int) -> int:
        from jax.experimental import multihost_utils

        return int(np.asarray(multihost_utils.process_allgather(np.array([value], dtype=np.int64))).max())


def collective_for(ctx: RankContext) -> Collective:
    if not ctx.distributed:
        return SingleProcess()
    if ctx.launcher == "skrl-jax":
        return JaxCollective(ctx)
    return TorchCollective(ctx)
