"""skrl's JAX launcher: its command for the dry run, and the ranks islab-train starts in its place (pure).

``python -m skrl.utils.distributed.jax --nnodes N --nproc_per_node P --node_rank K
--coordinator_address host:port -- -m islab.worker <worker args>`` is what a user would run
(:func:`node_argv`; skrl's launcher runs ``[python, *program]``, so ``-m islab.worker`` after ``--``
is as portable as torchrun's command).
It exits 0 even when a rank fails and hangs when a peer dies, so a real launch starts the same
ranks itself (:func:`rank_envs`: exactly the ``JAX_*`` variables skrl's launcher sets), watches
them and stops the others at the first failure (:class:`SkrlJaxNode`).

``jax.distributed.initialize`` waits for every process and skrl calls it at import without a
timeout, so :class:`JaxRendezvousWatch` enforces ``rendezvous.timeout_s`` from the ranks' output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from islab.spec.addresses import split_host_port

if TYPE_CHECKING:
    from islab.spec.run_spec import RunSpec

NAME = "skrl-jax"
LAUNCHER_MODULE = "skrl.utils.distributed.jax"


def node_argv(spec: RunSpec, node_rank: int, coordinator: str, program: Sequence[str]) -> tuple[str, ...]:
    """skrl's launcher runs ``[sys.executable, script, *args]`` for each rank, ``program`` being
    ``script, *args``. After ``--`` its parser takes ``-m`` as the script, so our worker runs as
    ``python -m islab.worker ...``: portable to any node where islab is installed (no absolute path
    of this machine's worker file); a user's entry point is its script path and arguments."""
    return (
        spec.python, "-m", LAUNCHER_MODULE,
        "--nnodes", str(spec.nnodes),
        "--nproc_per_node", str(spec.nproc_per_node),
        "--node_rank", str(node_rank),
        "--coordinator_address", coordinator,
        "--", *program,
    )  # fmt: skip


def rank_envs(spec: RunSpec, node_rank: int, coordinator: str) -> list[tuple[int, int, dict[str, str]]]:
    """(global rank, local rank, JAX_* variables) of the processes skrl's launcher would start.

    skrl/utils/distributed/jax/launcher.py: JAX_LOCAL_RANK=j, JAX_RANK=node_rank*nproc+j,
    JAX_WORLD_SIZE=nnodes*nproc, JAX_COORDINATOR_ADDR / JAX_COORDINATOR_PORT split from the address.
    """
    host, port = split_host_port(coordinator)
    ranks = []
    for local_rank in range(spec.nproc_per_node):
        global_rank = node_rank * spec.nproc_per_node + local_rank
        ranks.append((global_rank, local_rank, {
            "JAX_LOCAL_RANK": str(local_rank),
            "JAX_RANK": str(global_rank),
            "JAX_WORLD_SIZE": str(spec.nnodes * spec.nproc_per_node),
            "JAX_COORDINATOR_ADDR": host,
            "JAX_COORDINATOR_PORT": str(port),
        }))  # fmt: skip
    return ranks
