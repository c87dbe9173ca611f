"""The launch plan: what each node runs, as plain frozen data (the planner's output, everyone else's input).

Distributed training here has three levels:

* a **node** is one machine; ``nnodes`` of them take part, numbered by ``node_rank``;
* each node starts ``nproc_per_node`` **ranks** (one per GPU, or CPU processes talking gloo);
  ``world_size = nnodes * nproc_per_node`` and ``rank = node_rank * nproc_per_node + local_rank``;
* a **launcher** on each node starts that node's ranks and tells them how to meet: torchrun for
  rl_games, rsl_rl and skrl-torch (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``, ``LOCAL_RANK`` …),
  skrl's JAX launcher for skrl-JAX (``JAX_RANK``, ``JAX_COORDINATOR_ADDR`` …).

The ranks meet at a **rendezvous**. With torchrun's *static* rendezvous, node 0 listens on
``master_addr:master_port`` and every node is told its ``--node_rank``. With *c10d*, the nodes meet
at ``--rdzv_endpoint`` under a shared ``--rdzv_id`` and torchrun assigns node ranks itself (it
ignores ``--node_rank``, so none is passed). skrl-JAX nodes meet at ``--coordinator_address``.

:func:`islab.plan.plan.build_plan` writes a :class:`LaunchPlan`; the dry run prints it
(:mod:`islab.plan.dry_run`), the doctor checks it and :mod:`islab.run.supervise` runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from islab.spec.budget import Budget
from islab.spec.fields import TORCHRUN_STATIC_RDZV_TIMEOUT_S

Launcher = Literal["torchrun", "skrl-jax"]


@dataclass(frozen=True)
class RankLaunch:
    """One rank started directly by islab-train (skrl-JAX, whose own launcher hides failures)."""

    global_rank: int
    local_rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str]  # what the plan adds, including the JAX_* variables skrl's launcher sets


@dataclass(frozen=True)
class NodePlan:
    """What one node runs. ``env`` is only what the plan adds to the inherited environment."""

    node_rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    # For skrl-JAX: the ranks ``argv`` would start, so a real launch can supervise them itself.
    ranks: tuple[RankLaunch, ...] = ()


@dataclass(frozen=True)
class LaunchPlan:
    launcher: Launcher
    run_dir: str
    nodes: tuple[NodePlan, ...]
    # What every rank runs after the launcher's options: ``-m islab.worker ARGS`` or the user's entry
    # point (the pre-flight swaps exactly this for its probe).
    program: tuple[str, ...] = ()
    # Values the planner filled in (free port, default addresses): shown by the dry run.
    derived: Mapping[str, str] = field(default_factory=dict)
    # The port node 0 must be able to bind before a real launch (static master / JAX coordinator).
    node0_port: int | None = None
    # Where the nodes meet (host:port) and how long node 0 waits for them: for the supervisor's
    # "node(s) did not join" message, to bound the skrl-JAX rendezvous, and for the doctor.
    rendezvous_address: str | None = None
    rendezvous_kind: str | None = None  # "static master" | "c10d endpoint" | "JAX coordinator"
    rendezvous_timeout_s: int = TORCHRUN_STATIC_RDZV_TIMEOUT_S
    nnodes: int = 1
    # What the job trains (iterations x ranks x envs x rollout): shown by the dry run.
    budget: Budget | None = None
    # A user entry point instead of our worker: the launcher writes the rank logs and reads progress
    # from TensorBoard events under ``events_root`` (written after ``events_not_before``, epoch s).
    entrypoint: bool = False
    events_root: str | None = None
    events_library: str | None = None
    events_not_before: float | None = None
    # Seconds without a finished iteration on any rank of a node before it counts as hung (0: off).
    hang_timeout_s: int = 0
    # Isaac Lab's trainer: its ranks stop cleanly on SIGINT, its run folders and checkpoints are
    # recorded for --resume, play and export (islab.run.isaaclab_launch).
    isaaclab: bool = False
    # --resume alone: the worker trains to the run's original target (no budget known here).
    to_target: bool = False
    # At launch, torchrun forks our worker's ranks from its agent (islab.plan.torchrun, "Forked ranks").
    forked_ranks: bool = False
    # ... and the modules its agent imports before it forks them (the library's adapter), once for all ranks.
    rank_imports: tuple[str, ...] = ()
    # The agent-config overrides the ranks apply (KEY=VALUE): a failure names the one its traceback points at.
    overrides: tuple[str, ...] = ()

    def node(self, node_rank: int) -> NodePlan:
        for node in self.nodes:
            if node.node_rank == node_rank:
                return node
        raise KeyError(f"node {node_rank} is not in this plan")
