"""SLURM: the allocation as a source of the spec (the batch scripts that use it: :mod:`islab.plan.sbatch`).

On a SLURM cluster nobody should type node ranks or master addresses: the scheduler already
knows them. Inside an allocation, one ``islab-train`` runs per node (``srun --ntasks-per-node=1``)
and reads:

==========================  =================================================================
``SLURM_STEP_NUM_NODES``    ``nnodes`` (the step's nodes; ``SLURM_NNODES`` outside a step)
``SLURM_NODEID``            ``node_rank`` (this node's index in the step, 0-based)
``SLURM_STEP_NODELIST``     the first host (``SLURM_JOB_NODELIST`` outside a step), expanded
                            with python-hostlist (``gpu[01-04,07]`` -> gpu01 … gpu07), is node 0:
                            the static master address / c10d endpoint / JAX coordinator host
``SLURM_JOB_ID``            the port: ``20000 + job_id % 20000``, the same on every node of the
                            job and different for neighbouring jobs sharing a node
==========================  =================================================================

Precedence: **command line > SLURM allocation > ISLAB_* environment > cluster file > defaults**.
The allocation is a fact about where this process runs, so it beats settings written for "any"
cluster (a YAML file, exported variables); an option typed on this command line still wins.

SLURM mode is on with ``--slurm``, automatically under ``srun`` (``SLURM_STEP_ID`` set; the batch
script itself has ``SLURM_PROCID`` but is not a step), and off with ``--no-slurm``. Everything here
is a pure function of the environment mapping passed in.
python-hostlist is imported only when a node list is expanded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from islab.libs.registry import LIBRARIES, launcher_of
from islab.resolve.job import JobIdentity
from islab.resolve.layers import Provided
from islab.spec.addresses import join_host_port
from islab.spec.issues import Issue, SpecError
from islab.spec.run_spec import RunSpec

PORT_BASE = 20000
PORT_SPAN = 20000
# "2(x3),1" -> tasks per node of the step: 2, 2, 2, 1
_TASKS_PER_NODE_ITEM = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def in_srun_step(environ: Mapping[str, str]) -> bool:
    """Is this process a task that ``srun`` started (where SLURM mode switches on by itself)?"""
    # SLURM_STEP_ID only: a batch script also has SLURM_PROCID=0 but is not a step, and starting
    # node 0 alone there would wait forever for the other nodes.
    return "SLURM_JOB_ID" in environ and "SLURM_STEP_ID" in environ


def expand_nodelist(nodelist: str) -> list[str]:
    """``gpu[01-04,07]`` -> ``["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]``; ``a1,b[2-3]`` ->
    ``["a1", "b2", "b3"]``. Raises ValueError for text that is not a SLURM host list."""
    import hostlist  # python-hostlist: the same syntax and order as `scontrol show hostnames`

    text = nodelist.strip()
    if not text:
        raise ValueError("the node list is empty")
    try:
        hosts = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise ValueError(str(exc)) from None
    if not hosts:
        raise ValueError("the node list names no host")
    return list(hosts)


def job_port(job_id: int) -> int:
    """The rendezvous port of a job: deterministic, so every node computes the same one."""
    return PORT_BASE + job_id % PORT_SPAN


def tasks_per_node(text: str) -> list[int]:
    """``SLURM_STEP_TASKS_PER_NODE`` (``"2(x3),1"``) -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for item in text.split(","):
        match = _TASKS_PER_NODE_ITEM.fullmatch(item.strip())
        if not match:
            raise ValueError(f"cannot read {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


@dataclass(frozen=True)
class Allocation:
    """This node's place in a SLURM job step."""

    job_id: int
    nnodes: int
    node_rank: int
    hosts: tuple[str, ...]
    nodelist_variable: str  # which variable the hosts came from, for messages
    nnodes_variable: str
    restart_count: int = 0  # SLURM_RESTART_COUNT: how often the job was requeued

    @property
    def identity(self) -> JobIdentity:
        """The job: its run directory ``slurm-<id>``, a requeue continuing its own checkpoint."""
        restart = f"SLURM requeue {self.restart_count}" if self.restart_count > 0 else None
        return JobIdentity("slurm", f"slurm-{self.job_id}", restart=restart)

    @property
    def master_host(self) -> str:
        return self.hosts[0]

    @property
    def port(self) -> int:
        return job_port(self.job_id)

    def layer(self, chosen: Mapping[str, Any]) -> dict[str, Provided]:
        """The allocation as a spec layer. ``chosen`` holds what the other layers set, because
        the rendezvous lands in a different field per launcher: the static master address and
        port (torchrun), the c10d endpoint and id, or the JAX coordinator address."""
        port_origin = f"SLURM_JOB_ID ({PORT_BASE} + {self.job_id} % {PORT_SPAN})"
        host_origin = f"{self.nodelist_variable} (first host)"
        layer = {
            "nnodes": Provided(self.nnodes, self.nnodes_variable),
            "node_rank": Provided(self.node_rank, "SLURM_NODEID"),
        }
        rendezvous_id = Provided(f"slurm-{self.job_id}", "SLURM_JOB_ID")
        return layer | rendezvous_layer(chosen, Provided(self.master_host, host_origin),
                                        Provided(self.port, port_origin), rendezvous_id)  # fmt: skip


def rendezvous_layer(
    chosen: Mapping[str, Any], host: Provided, port: Provided, rendezvous_id: Provided | None = None
) -> dict[str, Provided]:
    """Node 0's address where the launcher the other layers chose reads it (every scheduler
    allocation places it so): skrl-JAX's coordinator address, the c10d endpoint (and a rendezvous id
    unless one was chosen), or torchrun's static master address and port."""
    address = Provided(join_host_port(host.value, port.value), f"{host.origin} and {port.origin}")
    if launcher_chosen(chosen) == "skrl-jax":
        return {"coordinator_address": address}
    if chosen.get("rendezvous.backend") == "c10d":
        layer = {"rendezvous.endpoint": address}
        if "rendezvous.id" not in chosen and rendezvous_id is not None:
            layer["rendezvous.id"] = rendezvous_id
        return layer
    return {"rendezvous.master_addr": host, "rendezvous.master_port": port}


def launcher_chosen(chosen: Mapping[str, Any]) -> str | None:
    """The launcher the other layers chose; a framework only one library has names it even when
    the library was left out (the spec then says what is wrong with the pair)."""
    framework = str(chosen.get("ml_framework", RunSpec.model_fields["ml_framework"].default))
    lib = str(chosen.get("lib", RunSpec.model_fields["lib"].default))
    return launcher_of(lib, framework) or next(filter(None, (launcher_of(name, framework) for name in LIBRARIES)), None)


def _int_variable(environ: Mapping[str, str], name: str) -> int:
    text = environ.get(name, "").strip()
    if not text.isdigit():
        problem = "is not set" if not text else f"is {text!r}, not a whole number"
        raise SpecError(Issue(
            name, f"{problem} (needed to run inside a SLURM allocation)",
            "Start islab-train with srun inside an sbatch/salloc allocation, or drop --slurm",
        ))  # fmt: skip
    return int(text)


def allocation_from_environ(environ: Mapping[str, str]) -> Allocation:
    """Read this node's place from srun's variables; SpecError names a missing or odd one."""
    if "SLURM_JOB_ID" not in environ:
        raise SpecError(Issue(
            "--slurm", "SLURM_JOB_ID is not set, so this is not running inside a SLURM allocation",
            "Submit with 'islab-train sbatch ... > job.sh && sbatch job.sh', or drop --slurm",
        ))  # fmt: skip
    job_id = _int_variable(environ, "SLURM_JOB_ID")
    in_step = "SLURM_STEP_NUM_NODES" in environ
    nnodes_variable = "SLURM_STEP_NUM_NODES" if in_step else "SLURM_NNODES"
    if nnodes_variable not in environ and "SLURM_JOB_NUM_NODES" in environ:
        nnodes_variable = "SLURM_JOB_NUM_NODES"
    nnodes = _int_variable(environ, nnodes_variable)
    node_rank = _int_variable(environ, "SLURM_NODEID")
    nodelist_variable = next(
        (name for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if environ.get(name)),
        "SLURM_JOB_NODELIST",
    )
    try:
        hosts = tuple(expand_nodelist(environ.get(nodelist_variable, "")))
    except ValueError as reason:
        raise SpecError(Issue(
            nodelist_variable, f"cannot be read as a SLURM host list ({reason})",
            "Run inside an allocation made by sbatch/salloc (scontrol show hostnames $SLURM_JOB_NODELIST should work)",
        )) from None  # fmt: skip
    if len(hosts) != nnodes:
        raise SpecError(Issue(
            nodelist_variable, f"names {len(hosts)} host(s) but {nnodes_variable}={nnodes}",
            "Run one islab-train per node of the allocation: srun --ntasks-per-node=1 islab-train --slurm ...",
        ))  # fmt: skip
    step_tasks = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    if step_tasks and "SLURM_STEP_ID" in environ:
        try:
            counts = tasks_per_node(step_tasks)
        except ValueError:
            counts = []
        if counts and max(counts) > 1:
            raise SpecError(Issue(
                "SLURM_STEP_TASKS_PER_NODE", f"srun started {max(counts)} islab-train processes on one node",
                "islab-train starts a node's ranks itself: use srun --ntasks-per-node=1 (and --nproc/--gpus for "
                "the ranks per node)",
            ))  # fmt: skip
    restarts = environ.get("SLURM_RESTART_COUNT", "").strip()
    restart_count = int(restarts) if restarts.isdigit() else 0
    return Allocation(job_id, nnodes, node_rank, hosts, nodelist_variable, nnodes_variable, restart_count)


__all__ = [
    "Allocation",
    "allocation_from_environ",
    "expand_nodelist",
    "in_srun_step",
    "job_port",
    "rendezvous_layer",
    "tasks_per_node",
]
