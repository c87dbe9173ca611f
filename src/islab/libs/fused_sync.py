"""Fused synchronisation: one collective per optimizer update instead of three to five.

Why
---
Every library syncs a distributed PPO update with several small collectives: the gradients, the
KL divergence of the adaptive learning-rate schedule, a broadcast of rank 0's learning rate, and
(per iteration, or per minibatch) the observation/value normalizer statistics. On gloo and on NCCL
alike a collective of a small policy costs its latency, not its bytes (measured here: 188 µs for
1 float, 541 µs for 40,000), so the number of calls sets the sync share.

The fused path packs everything one optimizer update needs into ONE flat buffer and all-reduces
it once: the gradients (averaged, exactly as the libraries do: sum, then divide by the world
size), plus the local KL value. Every rank then runs the learning-rate schedule itself from the
same all-reduced KL, so no rank has to broadcast its rate: the same decisions, on every rank, from
the same bits. Normalizer statistics of a whole iteration are packed into one more buffer.

Switch
------
``ISLAB_SYNC=fused`` (the default) or ``ISLAB_SYNC=stock`` (each library's own collectives,
plus islab's normalizer fixes) — read once per adapter at build time. Both learn the same
(tests/libs/test_fused_sync.py compares them); ``stock`` is there to measure against and to fall back on.

This module holds what the adapters share; each adapter (``islab.libs.<lib>``) decides where in
its library's update loop the buffer is filled and read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from islab.spec import sync_cost


def sync_mode(environ: dict[str, str] | None = None) -> str:
    """``fused`` or ``stock`` from ``ISLAB_SYNC`` (default ``fused``; :func:`islab.spec.sync_cost.sync_mode`)."""
    return sync_cost.sync_mode(os.environ if environ is None else environ)


def use_fused_sync(distributed: bool) -> bool:
    """Whether an adapter of a distributed run should take the fused path."""
    return distributed and sync_mode() == "fused"


def all_reduce_gradients_and(
    grads: Sequence[torch.Tensor], extras: Sequence[torch.Tensor], world_size: int
) -> torch.Tensor:
    """ONE all-reduce of ``grads`` and ``extras``: each gradient becomes the mean over ranks, in place
    (sum, then ``/ world_size``: the libraries' own arithmetic, so the bits match their stock path);
    returns the SUM over ranks of the concatenated ``extras`` (flattened, in order)."""
    parts = [g.reshape(-1) for g in grads]
    dtype = parts[0].dtype if parts else torch.float32
    device = parts[0].device if parts else (extras[0].device if extras else torch.device("cpu"))
    parts += [torch.as_tensor(e, device=device).detach().reshape(-1).to(dtype) for e in extras]
    flat = torch.cat(parts)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for grad in grads:
        count = grad.numel()
        grad.copy_(flat[offset : offset + count].view_as(grad) / world_size)
        offset += count
    return flat[offset:]


def as_broadcast_float(value: float) -> float:
    """``value`` as it comes out of the stock path's ``torch.tensor(lr).item()`` broadcast (float32):
    the fused path applies the same rounding, so both paths set the same learning rate."""
    return torch.tensor(value, dtype=torch.float32).item()


def all_reduce_float64(parts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """ONE all-reduce (sum) of several float64 tensors; returns the summed tensors in order."""
    if not parts:
        return []
    flat = torch.cat([p.reshape(-1).to(torch.float64) for p in parts])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    out, offset = [], 0
    for part in parts:
        out.append(flat[offset : offset + part.numel()].view(part.shape))
        offset += part.numel()
    return out


class PrefetchedBatches:
    """A normalizer's statistics for one update's batches, collected for the whole update in one
    collective before it starts (fused sync). Each normalizer update then takes the next entry --
    cyclically, since the libraries feed the same minibatches in every epoch -- after checking that
    the entry's local part is exactly what this update computes, so a change in the library's
    order of updates fails loudly instead of mixing statistics."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.entries: list[tuple[Any, Any]] = []
        self.cursor = 0

    def __bool__(self) -> bool:
        return bool(self.entries)

    def reset(self) -> None:
        self.entries, self.cursor = [], 0

    def add(self, local: Any, collected: Any) -> None:
        self.entries.append((local, collected))

    def take(self, local: Any, equal: Callable[[Any, Any], bool]) -> Any:
        """The collected statistics of the update whose local part is ``local``."""
        expected, collected = self.entries[self.cursor % len(self.entries)]
        self.cursor += 1
        if not equal(local, expected):
            raise RuntimeError(f"islab: fused normalizer sync out of step with {self.library}'s updates")
        return collected
