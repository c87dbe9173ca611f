"""The rules of each launcher, checked by :class:`~islab.spec.run_spec.RunSpec` once the fields
are valid on their own: which rendezvous options torchrun's static and c10d rendezvous take, and
what skrl's JAX launcher (a coordinator address instead of a rendezvous) allows; and which fields
every node of a multi-node launch must agree on.

The checks read the few fields they need through :class:`LaunchFields` (a structural type that a
``RunSpec`` satisfies), so this module does not import the schema that imports it."""

from __future__ import annotations

from typing import Protocol

from islab.spec.issues import rule
from islab.spec.worker_args import spec_options

# What a launcher tells each rank about its job (torchrun, skrl's JAX launcher). A spec's env may not
# set them (they would be overwritten or break the group), and a play/export process, a job of its
# own, drops them (islab.policy.loading).
JOB_VARIABLES: tuple[str, ...] = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "JAX_RANK", "JAX_LOCAL_RANK", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR", "JAX_COORDINATOR_PORT",
)  # fmt: skip


class RendezvousFields(Protocol):
    """The rendezvous options the launchers' rules read (``RunSpec.rendezvous``)."""

    @property
    def backend(self) -> str: ...
    @property
    def master_addr(self) -> str | None: ...
    @property
    def master_port(self) -> int | None: ...
    @property
    def endpoint(self) -> str | None: ...
    @property
    def id(self) -> str | None: ...
    @property
    def last_call_s(self) -> int | None: ...


class LaunchFields(Protocol):
    """The spec fields the launchers' rules read."""

    @property
    def rendezvous(self) -> RendezvousFields: ...
    @property
    def coordinator_address(self) -> str | None: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def virtual_local_rank(self) -> bool: ...
    @property
    def monitor_interval_s(self) -> float | None: ...
    @property
    def start_method(self) -> str | None: ...


# Every field of the spec is in exactly one of these two lists (tests/cli/test_cli.py checks), so a new
# field must be classified. What may differ per node: its index, the interpreter's path and the
# environment on that machine (NCCL_SOCKET_IFNAME names its interface), where it mounts the shared
# log directory, and -- under torchrun, whose rendezvous sums the world size -- its process count.
# hang_timeout_s: each node watches (and can only signal) its own ranks. A worker option declared
# in islab.spec.worker_args is classified by its row (``Cli.shared``).
PER_NODE_FIELDS: tuple[str, ...] = (
    "node_rank", "python", "env", "log_dir", "nproc_per_node", "hang_timeout_s", "virtual_local_rank",
    "monitor_interval_s", "start_method",
    *(arg.name for arg in spec_options() if not arg.cli.shared),  # type: ignore[union-attr]
)  # fmt: skip
# What every node must agree on: nodes that differ here hang at the rendezvous or in a collective,
# or train something else than node 0 (the budget, seeds, checkpoints, the entry point). The run
# directory's name of a multi-node job is derived from these alone (islab.plan.plan.run_dir_for).
SHARED_FIELDS: tuple[str, ...] = (
    "lib", "ml_framework", "task", "task_module", "num_envs", "seed", "max_iterations", "total_env_steps",
    "nnodes", "device", "max_restarts", "coordinator_address", "run_name", "overrides", "resume",
    "checkpoint_interval", "logger", "entrypoint", "args", "isaaclab", "mjlab", "rendezvous.backend",
    "rendezvous.master_addr", "rendezvous.master_port", "rendezvous.endpoint", "rendezvous.id",
    "rendezvous.timeout_s", "rendezvous.last_call_s",
    *(arg.name for arg in spec_options() if arg.cli.shared),  # type: ignore[union-attr]
)  # fmt: skip


def shared_fields(launcher: str | None) -> tuple[str, ...]:
    """The fields every node must agree on under ``launcher``: skrl-JAX tells every rank
    ``JAX_WORLD_SIZE = nnodes x nproc_per_node``, so there the process count must agree too."""
    return (*SHARED_FIELDS, "nproc_per_node") if launcher == "skrl-jax" else SHARED_FIELDS


def check_jax(spec: LaunchFields) -> None:
    """What a spec launched by skrl's JAX launcher may not say (torchrun's options) and must say."""
    rdzv = spec.rendezvous
    if spec.coordinator_address is not None and spec.coordinator_address.startswith("["):
        # skrl's launcher (the printed command) splits the address on ':' and skrl joins
        # JAX_COORDINATOR_ADDR + ':' + port, so an IPv6 literal cannot reach jax.distributed
        # intact on every path; refuse it rather than hang at the rendezvous.
        raise rule(
            "coordinator_address",
            f"{spec.coordinator_address!r} is an IPv6 address, which skrl's JAX launcher cannot pass on "
            "(it splits the address on ':')",
            "Give node 0's IPv4 address or host name, e.g. 10.0.0.1:5000 (torchrun's --master-addr and "
            "--rdzv-endpoint do accept IPv6)",
        )
    torchrun_only = {
        "rendezvous.backend": rdzv.backend != "static",
        "rendezvous.master_addr": rdzv.master_addr is not None,
        "rendezvous.master_port": rdzv.master_port is not None,
        "rendezvous.endpoint": rdzv.endpoint is not None,
        "rendezvous.id": rdzv.id is not None,
        "rendezvous.last_call_s": rdzv.last_call_s is not None,
        "max_restarts": spec.max_restarts > 0,
        "virtual_local_rank": spec.virtual_local_rank,
        "monitor_interval_s": spec.monitor_interval_s is not None,
        "start_method": spec.start_method is not None,
    }
    for name, given in torchrun_only.items():
        if given:
            raise rule(
                name,
                "is a torchrun option; skrl with JAX is launched by skrl's JAX launcher",
                "Remove it (skrl's JAX launcher has no such option)"
                if name in ("virtual_local_rank", "monitor_interval_s", "start_method")
                else "Remove it; give node 0's address with --coordinator-address host:port instead",
            )
    if spec.nnodes > 1 and spec.coordinator_address is None:
        raise rule(
            "coordinator_address",
            f"a {spec.nnodes}-node JAX run needs node 0's coordinator address",
            "Pass --coordinator-address <node0-host>:<port> (the same on every node)",
        )


def check_torchrun(spec: LaunchFields) -> None:
    """The static and c10d rendezvous each take their own options, and several nodes need a meeting point."""
    rdzv = spec.rendezvous
    if rdzv.backend == "static":
        for name, value, fix in (
            ("rendezvous.endpoint", rdzv.endpoint, "use --master-addr/--master-port"),
            ("rendezvous.id", rdzv.id, "remove it"),
            ("rendezvous.last_call_s", rdzv.last_call_s, "remove it"),
        ):
            if value is not None:
                raise rule(
                    name,
                    "only applies to the c10d rendezvous",
                    f"Add --rdzv-backend c10d, or {fix}",
                )
        if spec.nnodes > 1 and rdzv.master_addr is None:
            raise rule(
                "rendezvous.master_addr",
                f"a {spec.nnodes}-node static rendezvous needs node 0's address",
                "Pass --master-addr <node0-host> (and --master-port) on every node, "
                "or use --rdzv-backend c10d --rdzv-endpoint host:port",
            )
    else:
        for name, value in (
            ("rendezvous.master_addr", rdzv.master_addr),
            ("rendezvous.master_port", rdzv.master_port),
        ):
            if value is not None:
                raise rule(
                    name,
                    "only applies to the static rendezvous; c10d uses the endpoint",
                    "Use --rdzv-endpoint host:port instead",
                )
        if spec.nnodes > 1 and rdzv.endpoint is None:
            raise rule(
                "rendezvous.endpoint",
                f"a {spec.nnodes}-node c10d rendezvous needs an endpoint every node can reach",
                "Pass --rdzv-endpoint <host>:<port> (and --rdzv-id) on every node",
            )
