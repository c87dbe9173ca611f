"""SkyPilot: take the node layout from the variables SkyPilot sets in every node's ``run``.

A task written by ``islab-train sky`` runs one ``islab-train`` per node, which reads its place in the
job from the environment, as :mod:`islab.resolve.slurm` reads srun's (SkyPilot's docs, "Environment
variables for ``run``"; sky/skylet/constants.py):

==============================  ==============================================================
``SKYPILOT_NUM_NODES``          ``nnodes``
``SKYPILOT_NODE_RANK``          ``node_rank`` (0 .. num_nodes-1)
``SKYPILOT_NODE_IPS``           one IP per line in node-rank order: the first line is node 0,
                                the static master address / c10d endpoint / JAX coordinator host
``SKYPILOT_NUM_GPUS_PER_NODE``  ``nproc_per_node`` when above 0 (the count of
                                ``accelerators: TYPE:N``); the task file's ``--gpus N`` wins
``SKYPILOT_TASK_ID``            the port, ``20000 + crc32(task id) % 20000`` (the same on every
                                node; SkyPilot gives none), and the run directory's leaf: a
                                managed job keeps its task id through every recovery, so the
                                recovered job resumes from its checkpoint on the mounted storage
==============================  ==============================================================

Precedence, as for SLURM and Kubernetes: **command line > allocation > ISLAB_* environment >
cluster file > defaults**. SkyPilot mode is on with ``--sky``, by itself where SkyPilot's ``run``
variables are set (``SKYPILOT_NODE_RANK`` and ``SKYPILOT_NODE_IPS``), and off with ``--no-sky``.
Everything here is a pure function of the environment mapping passed in.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from islab.resolve.job import JobIdentity
from islab.resolve.layers import Provided
from islab.resolve.slurm import PORT_BASE, PORT_SPAN, job_port, rendezvous_layer
from islab.sky.names import (
    GPUS_PER_NODE_VARIABLE,
    NODE_IPS_VARIABLE,
    NODE_RANK_VARIABLE,
    NUM_NODES_VARIABLE,
    TASK_ID_VARIABLE,
    is_managed,
)
from islab.spec.issues import Issue, SpecError

# Without a task id (islab-train started by hand with SkyPilot's variables): torchrun's own default port.
DEFAULT_PORT = 29500
_LEAF_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def in_skypilot_run(environ: Mapping[str, str]) -> bool:
    """Is this a SkyPilot task's ``run`` (where SkyPilot mode switches on by itself)? Setup commands
    get SKYPILOT_SETUP_NODE_RANK instead, an ssh session neither."""
    return NODE_RANK_VARIABLE in environ and NODE_IPS_VARIABLE in environ


@dataclass(frozen=True)
class SkyPilotAllocation:
    """This node's place in a SkyPilot task."""

    nnodes: int
    node_rank: int
    hosts: tuple[str, ...]
    task_id: str | None
    gpus_per_node: int

    @property
    def master_host(self) -> str:
        return self.hosts[0]

    @property
    def port(self) -> int:
        return job_port(zlib.crc32(self.task_id.encode())) if self.task_id else DEFAULT_PORT

    @property
    def run_leaf(self) -> str | None:
        """The run directory's last part: the task id, the same on every node and in every recovery
        of a managed job (None without one: the usual multi-node name)."""
        return _LEAF_UNSAFE.sub("-", self.task_id) if self.task_id else None

    @property
    def identity(self) -> JobIdentity | None:
        """The job (:mod:`islab.resolve.job`): its run directory named after the task id; every start
        of a managed job (``sky jobs launch``) continues its own checkpoint when there is one, since
        a recovery keeps the task id. None without a task id (a plain multi-node run)."""
        if self.run_leaf is None:
            return None
        restart = f"SkyPilot managed job {self.task_id} recovered" if is_managed(self.task_id) else None
        return JobIdentity("sky", self.run_leaf, restart=restart)

    def layer(self, chosen: Mapping[str, Any]) -> dict[str, Provided]:
        """The allocation as a spec layer; ``chosen`` holds what the other layers set, because the
        rendezvous lands in a different field per launcher (as in :meth:`islab.resolve.slurm.Allocation.layer`)."""
        host_origin = f"{NODE_IPS_VARIABLE} (first line)"
        port_origin = (f"{TASK_ID_VARIABLE} ({PORT_BASE} + crc32 % {PORT_SPAN})" if self.task_id
                       else f"torchrun's default port {DEFAULT_PORT}")  # fmt: skip
        layer = {
            "nnodes": Provided(self.nnodes, NUM_NODES_VARIABLE),
            "node_rank": Provided(self.node_rank, NODE_RANK_VARIABLE),
        }
        if self.gpus_per_node > 0:
            layer["nproc_per_node"] = Provided(self.gpus_per_node, GPUS_PER_NODE_VARIABLE)
        rendezvous_id = Provided(self.run_leaf, TASK_ID_VARIABLE) if self.run_leaf else None
        return layer | rendezvous_layer(chosen, Provided(self.master_host, host_origin),
                                        Provided(self.port, port_origin), rendezvous_id)  # fmt: skip


def _refuse(variable: str, problem: str) -> SpecError:
    return SpecError(Issue(
        variable, f"{problem} (needed to run inside a SkyPilot task)",
        "Run islab-train in the 'run' of the task file 'islab-train sky' writes (sky launch / sky jobs launch), "
        "or drop --sky",
    ))  # fmt: skip


def _count(environ: Mapping[str, str], name: str, *, required: bool = True) -> int:
    text = environ.get(name, "").strip()
    if text.isdigit():
        return int(text)
    if not text and not required:
        return 0
    raise _refuse(name, "is not set" if not text else f"is {text!r}, not a whole number")


def allocation_from_environ(environ: Mapping[str, str]) -> SkyPilotAllocation:
    """Read this node's place from SkyPilot's variables; SpecError names a missing or odd one."""
    hosts = tuple(line.strip() for line in environ.get(NODE_IPS_VARIABLE, "").splitlines() if line.strip())
    if not hosts or any(any(ch.isspace() for ch in host) for host in hosts):
        raise _refuse(NODE_IPS_VARIABLE, "is not set" if not hosts else "is not one IP address per line")
    nnodes = _count(environ, NUM_NODES_VARIABLE)
    node_rank = _count(environ, NODE_RANK_VARIABLE)
    if len(hosts) != nnodes:
        raise _refuse(NODE_IPS_VARIABLE, f"names {len(hosts)} node(s) but {NUM_NODES_VARIABLE}={nnodes}")
    if node_rank >= nnodes:
        raise _refuse(NODE_RANK_VARIABLE, f"is {node_rank}, not below {NUM_NODES_VARIABLE}={nnodes}")
    task_id = environ.get(TASK_ID_VARIABLE, "").strip() or None
    gpus = _count(environ, GPUS_PER_NODE_VARIABLE, required=False)
    return SkyPilotAllocation(nnodes, node_rank, hosts, task_id, gpus)


__all__ = ["SkyPilotAllocation", "allocation_from_environ", "in_skypilot_run"]
