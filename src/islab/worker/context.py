"""Who am I? The rank's view of the job, read from the launcher's environment.

A distributed job is N copies of the same program. Each copy learns its place from environment
variables that the launcher sets before starting it:

* torchrun sets ``RANK`` (global index, 0..WORLD_SIZE-1), ``LOCAL_RANK`` (index on this node),
  ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``, plus ``MASTER_ADDR``/``MASTER_PORT`` for the
  rendezvous store;
* skrl's JAX launcher sets ``JAX_RANK``, ``JAX_LOCAL_RANK``, ``JAX_WORLD_SIZE`` and
  ``JAX_COORDINATOR_ADDR``/``JAX_COORDINATOR_PORT``; skrl itself calls
  ``jax.distributed.initialize`` from those at import time.

From those we derive everything rank-specific, once, in ``RankContext``: the device (GPU number
``LOCAL_RANK``, or CPU), the collective backend (NCCL needs CUDA; gloo runs on CPU), and the seed
(base seed + global rank, so ranks explore differently but a rerun is reproducible).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from islab.spec.worker_args import THREADS_VARIABLE, default_of


@dataclass(frozen=True)
class RankContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: str  # "cuda:K" or "cpu"
    backend: str  # "nccl" or "gloo"
    base_seed: int
    launcher: str  # "torchrun", "skrl-jax" or "single"

    @property
    def seed(self) -> int:
        """This rank's seed. Libraries that add the rank themselves get ``base_seed`` instead."""
        return self.base_seed + self.rank

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environ(cls, device: str, base_seed: int, environ: Mapping[str, str] | None = None) -> RankContext:
        env = os.environ if environ is None else environ
        if "JAX_RANK" in env:
            launcher, prefix = "skrl-jax", "JAX_"
        elif "RANK" in env and "WORLD_SIZE" in env:
            launcher, prefix = "torchrun", ""
        else:
            launcher, prefix = "single", None
        if prefix is None:
            rank = local_rank = 0
            world_size = local_world_size = 1
        else:
            rank = int(env[f"{prefix}RANK"])
            local_rank = int(env.get(f"{prefix}LOCAL_RANK", rank))
            world_size = int(env[f"{prefix}WORLD_SIZE"])
            # torchrun exports LOCAL_WORLD_SIZE; skrl's JAX launcher exports no local world size, so
            # islab-train's skrl-JAX launcher adds JAX_LOCAL_WORLD_SIZE (the ranks on this node). Only a
            # skrl launcher started by hand leaves it out; then the world size is the safe guess.
            local_world_size = int(env.get("LOCAL_WORLD_SIZE", env.get("JAX_LOCAL_WORLD_SIZE", world_size)))
        return cls(
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            device=resolve_device(device, local_rank, launcher, rank=rank, local_world_size=local_world_size),
            backend="nccl" if device.startswith("cuda") else "gloo",
            base_seed=base_seed,
            launcher=launcher,
        )


def resolve_device(
    device: str,
    local_rank: int,
    launcher: str = "single",
    *,
    visible: int | None = None,
    rank: int | None = None,
    local_world_size: int = 1,
) -> str:
    """``cuda`` -> ``cuda:{LOCAL_RANK}`` among the GPUs this process sees (``visible``; default
    ``torch.cuda.device_count()``, the runtime's view after CUDA_VISIBLE_DEVICES and MIG).

    A launcher that starts one rank per node and binds it one GPU (SLURM's per-task binding) leaves
    that rank ``cuda:0``: with one visible device and one rank on the node that is the answer. Any
    other shortfall (torchrun started by hand with more ranks than GPUs, CUDA_VISIBLE_DEVICES=0 with
    LOCAL_WORLD_SIZE > 1, a CUDA_VISIBLE_DEVICES naming absent GPUs, MIG showing one instance) would
    put several ranks on one GPU, silently: an error instead. A skrl-JAX rank never falls back: JAX
    picks its own GPU by local rank, so the env would sit on another GPU than the learner."""
    if not device.startswith("cuda"):
        return "cpu"
    if ":" in device:
        return device
    if visible is None:
        visible = torch.cuda.device_count()
    return cuda_device_for(
        local_rank, visible, launcher, rank=local_rank if rank is None else rank, local_world_size=local_world_size
    )


def cuda_device_for(local_rank: int, visible: int, launcher: str, *, rank: int, local_world_size: int) -> str:
    """The rule of ``resolve_device``, pure: which ``cuda:K`` this local rank takes, or why none."""
    if visible == 0:
        raise RuntimeError(f"device 'cuda' was requested but no CUDA device is visible to rank {rank}")
    if local_rank < visible:
        return f"cuda:{local_rank}"
    if visible == 1 and local_world_size == 1 and launcher != "skrl-jax":
        return "cuda:0"  # the node's only rank, bound one GPU by the launcher: its GPU is cuda:0
    raise RuntimeError(
        f"rank {rank} (local rank {local_rank} of {local_world_size} on this node) has no GPU of its own: "
        f"this process sees {visible} CUDA device(s) "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}), so it would share one "
        "with another rank. Start at most one rank per visible GPU (islab-train --gpus N), or make "
        "CUDA_VISIBLE_DEVICES name GPUs that exist (nvidia-smi -L; a MIG instance counts as one)"
    )


def cpu_threads_per_rank(local_world_size: int, environ: Mapping[str, str] | None = None) -> int:
    """Ranks on one node share its cores: ``cores // local world size`` each, since
    oversubscription costs more than it gains. ``ISLAB_THREADS_PER_RANK`` overrides it (benchmarks,
    shared machines); torchrun's OMP_NUM_THREADS=1 is not used, as it ignores the core count."""
    env = os.environ if environ is None else environ
    if env.get(THREADS_VARIABLE, "").strip():
        return max(1, int(env[THREADS_VARIABLE]))
    return max(1, (os.cpu_count() or 1) // local_world_size)


def configure_process(ctx: RankContext) -> None:
    """Threads, denormals and global RNGs for this rank; call once, before building anything."""
    if ctx.device == "cpu":
        torch.set_num_threads(cpu_threads_per_rank(ctx.local_world_size))
        # Denormal floats slowed rsl_rl training ~10x on CPU (docs/libraries.md).
        torch.set_flush_denormal(True)
    else:
        torch.cuda.set_device(torch.device(ctx.device))
    random.seed(ctx.seed)
    np.random.seed(ctx.seed % 2**32)
    torch.manual_seed(ctx.seed)


def attempt_store(ctx: RankContext, timeout: timedelta, environ: Mapping[str, str] | None = None) -> Any | None:
    """After an elastic restart, the rendezvous store to join, with keys private to this attempt.

    torchrun's static rendezvous keeps one TCPStore for the whole job and the ``env://`` init adds
    no per-attempt prefix (torch assumes a new store per retry), so restarted ranks read the gloo
    addresses of the ranks that died and time out connecting to them (measured: "Gloo
    connectFullMesh failed ... Connection refused" on every restart). Prefixing the keys with the
    restart count gives every attempt a clean namespace on either rendezvous backend. Returns
    None on a first attempt, where ``env://`` works as is."""
    env = os.environ if environ is None else environ
    restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restart == 0 or "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        return None
    import torch.distributed as dist

    # As torch's own env:// handler: with the agent's store every rank is a client; without it
    # rank 0 hosts the store.
    agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        env["MASTER_ADDR"],
        int(env["MASTER_PORT"]),
        world_size=ctx.world_size,
        is_master=not agent_store and ctx.rank == 0,
        timeout=timeout,
        multi_tenant=not agent_store,
    )
    return dist.PrefixStore(f"islab/attempt_{restart}", store)


def init_process_group(ctx: RankContext, timeout_s: float = default_of("peer_timeout")) -> None:
    """Join the torch collective group (torchrun jobs only; skrl-JAX ranks use jax.distributed)."""
    import torch.distributed as dist

    if not ctx.distributed or ctx.launcher != "torchrun" or dist.is_initialized():
        return
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend=ctx.backend,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timeout,
        store=attempt_store(ctx, timeout),
        device_id=torch.device(ctx.device) if ctx.backend == "nccl" else None,
    )
