"""What ``doctor`` checks, gathered at the edge: this machine's facts and the rendezvous the plan chose.

:func:`gather_facts` runs the probes of :mod:`islab.doctor.probes` (interfaces, ``nvidia-smi``,
disk space, DNS, a bind or a TCP connect, the ranks' interpreter) and returns plain :class:`Facts`;
the checks over them (:mod:`islab.doctor.checks`) are pure.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from islab.doctor.probes import (
    Runtime,
    bind_state,
    connect_state,
    nearest_existing,
    probe_runtime,
    read_nvidia_smi,
    resolve,
    visible_gpu_count,
)
from islab.libs.registry import env_fixes
from islab.plan.launch_plan import LaunchPlan
from islab.spec.addresses import split_host_port
from islab.spec.run_spec import RunSpec

IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")  # what the ranks will see of the interfaces

Status = Literal["pass", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes meet, and what this node found out about it."""

    kind: str  # "static master" | "c10d endpoint" | "JAX coordinator"
    host: str
    port: int
    listens: bool | None  # True: this node hosts it; False: connects to it; None: unknown
    addresses: tuple[str, ...] = ()  # what ``host`` resolves to
    resolve_error: str | None = None
    port_state: str | None = None  # listen side: "free" | "busy" | "not-local"; connect side: "open" | reason


@dataclass(frozen=True)
class Facts:
    spec: RunSpec
    node_rank: int | None
    platform: str
    visible_gpus: int
    interfaces: tuple[str, ...]
    socket_env: Mapping[str, str]  # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME the ranks will see
    nvidia_smi: str | None  # text of `nvidia-smi`; None when it is not installed or failed
    disk_path: str
    disk_free: int | None
    rendezvous: Rendezvous | None
    runtime: Runtime | None = None  # None: not probed (the cheap subset)


def rendezvous_of(plan: LaunchPlan, spec: RunSpec, node_rank: int | None) -> Rendezvous | None:
    """Where the plan says the nodes meet, and whether this node hosts it (static/JAX: node 0)."""
    if plan.rendezvous_address is None or plan.rendezvous_kind is None:
        return None
    host, port = split_host_port(plan.rendezvous_address)
    if plan.rendezvous_kind == "c10d endpoint":
        listens = None  # torchrun assigns node ranks; the host that owns the address serves the store
    elif node_rank is None:
        listens = True if spec.nnodes == 1 else None
    else:
        listens = node_rank == 0
    return Rendezvous(plan.rendezvous_kind, host, port, listens)


def probe_rendezvous(target: Rendezvous, *, connect: bool) -> Rendezvous:
    """Resolve the host; on the hosting node check the port can be bound, elsewhere (``connect``)
    that it answers. c10d: whoever owns the endpoint's address hosts the store."""
    addresses, error = resolve(target.host)
    state = None
    listens = target.listens
    if addresses:
        local = bind_state(addresses[0], 0) != "not-local"
        if target.kind == "c10d endpoint":
            listens = local
        if listens:
            # torchrun's store and the JAX coordinator listen on every interface
            state = bind_state("", target.port)
            if state == "free" and not local:
                state = "not-local"
        elif listens is False and connect:
            state = connect_state(addresses[0], target.port)
    return Rendezvous(target.kind, target.host, target.port, listens, addresses, error, state)


def gather_facts(
    spec: RunSpec,
    plan: LaunchPlan,
    *,
    full: bool,
    environ: Mapping[str, str] = os.environ,
    visible_gpus: int | None = None,
) -> Facts:
    """Look at this machine. ``full`` adds the interpreter probe, nvidia-smi and TCP connects."""
    node_rank = spec.node_rank if spec.node_rank is not None else (0 if spec.nnodes == 1 else None)
    interfaces = tuple(name for _, name in socket.if_nameindex()) if hasattr(socket, "if_nameindex") else ()
    socket_env = {name: value for name in IFNAME_VARIABLES if (value := spec.env.get(name, environ.get(name)))}
    disk_path = nearest_existing(Path(spec.log_dir))
    try:
        disk_free: int | None = shutil.disk_usage(disk_path).free
    except OSError:
        disk_free = None
    target = rendezvous_of(plan, spec, node_rank)
    nvidia_smi = runtime = None
    if full:
        nvidia_smi = read_nvidia_smi()
        # the ranks' environment: the library's fixes (JAX_PLATFORMS=cpu ...) under the user's values
        ranks_environ = {**env_fixes(spec.lib, spec.ml_framework, spec.device), **environ, **spec.env}
        runtime = probe_runtime(spec.python, environ=ranks_environ, jax=spec.ml_framework == "jax")
    return Facts(
        spec=spec,
        node_rank=node_rank,
        platform=sys.platform,
        # What the ranks will see: the spec's env (e.g. CUDA_VISIBLE_DEVICES) over this shell's.
        visible_gpus=visible_gpu_count({**environ, **spec.env}) if visible_gpus is None else visible_gpus,
        interfaces=interfaces,
        socket_env=socket_env,
        nvidia_smi=nvidia_smi,
        disk_path=str(disk_path),
        disk_free=disk_free,
        rendezvous=probe_rendezvous(target, connect=full) if target else None,
        runtime=runtime,
    )
