"""Launch plans: a :class:`~islab.launcher.spec.RunSpec` turned into the exact commands each node runs.

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

Which launcher a library uses is decided here once, from the library registry
(:func:`islab.libs.registry.launcher_of`), and recorded in :attr:`LaunchPlan.launcher`; the
launcher's own module writes its command (:mod:`islab.launcher.torchrun`,
:mod:`islab.launcher.skrl_jax`) and everything later reads the plan.

Everything in this module is a pure function of its inputs -- the spec, the clock and a port the
caller found free (and the agent-config YAML the spec names, for the budget's rollout length) --
so the same inputs always give the same plan and tests need no machine state.
Probing ports, counting GPUs and starting processes happen at the edges (:mod:`islab.launcher.probes`,
:mod:`islab.launcher.supervise`). No torch import here, and nothing from the rank side.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Literal

from islab.agent_config import load_agent_config
from islab.budget import Budget
from islab.isaaclab_preset import tensorboard_root
from islab.launcher import skrl_jax, torchrun
from islab.launcher.addresses import join_host_port, split_host_port
from islab.launcher.issues import Issue, mask_env
from islab.launcher.launch_rules import shared_fields
from islab.launcher.resolve import ResolvedSpec
from islab.launcher.spec import (
    DEFAULT_C10D_ID,
    DEFAULT_MULTINODE_MASTER_PORT,
    DEFAULT_RDZV_TIMEOUT_S,
    WORKER_ONLY_FIELDS,
    RunSpec,
)
from islab.launcher.text import comment, shell_join, shell_quote
from islab.libs.registry import apply_env_fixes, launcher_of

Launcher = Literal["torchrun", "skrl-jax"]
LOCALHOST = "127.0.0.1"
RUN_DIR_TIME_FORMAT = "%Y-%m-%d_%H-%M-%S"
# The default hang timeout: never shorter than the waits a healthy job may have -- a collective
# waits up to the rendezvous timeout T for a slow peer, an elastic restart up to T for the nodes to
# join again, so twice T -- and never under ten minutes, since killing a healthy job costs more
# than noticing a hung one a few minutes late (docs/CLI.md, "Hangs").
HANG_TIMEOUT_RDZV_FACTOR = 2
MIN_DEFAULT_HANG_TIMEOUT_S = 600


def default_hang_timeout(rdzv_timeout_s: int) -> int:
    return max(HANG_TIMEOUT_RDZV_FACTOR * rdzv_timeout_s, MIN_DEFAULT_HANG_TIMEOUT_S)


def hang_timeout_of(spec: RunSpec) -> int:
    """Seconds without progress before the job counts as hung; 0: not watched (a user's entry
    point writes no heartbeats)."""
    if spec.entrypoint is not None:
        return 0
    return spec.hang_timeout_s if spec.hang_timeout_s is not None else default_hang_timeout(spec.rendezvous.timeout_s)


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
    # Values the planner filled in (free port, default addresses): shown by the dry run.
    derived: Mapping[str, str] = field(default_factory=dict)
    # The port node 0 must be able to bind before a real launch (static master / JAX coordinator).
    node0_port: int | None = None
    # Where the nodes meet (host:port) and how long node 0 waits for them: for the supervisor's
    # "node(s) did not join" message, to bound the skrl-JAX rendezvous, and for the doctor.
    rendezvous_address: str | None = None
    rendezvous_kind: str | None = None  # "static master" | "c10d endpoint" | "JAX coordinator"
    rendezvous_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S
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

    def node(self, node_rank: int) -> NodePlan:
        for node in self.nodes:
            if node.node_rank == node_rank:
                return node
        raise KeyError(f"node {node_rank} is not in this plan")


# ----------------------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------------------


def run_dir_for(spec: RunSpec, now: datetime, slurm_job_id: int | None = None, job_leaf: str | None = None) -> str:
    """``<log_dir>/<lib>/<task>/<leaf>[_<run_name>]`` -- chosen once, for all ranks; or the run
    directory being resumed, so a resumed run keeps its logs and checkpoints together.

    A SLURM job's leaf is ``slurm-<job id>``: every node knows it, and a requeued job (same id)
    finds its own run directory again and resumes from its checkpoint (:mod:`islab.worker.resume`).
    Otherwise, one node: the leaf is the launch time (``YYYY-mm-dd_HH-MM-SS``). Several nodes plan the
    directory each on its own, so its name must come from what they share, not from each node's
    clock: the rendezvous id (``--rdzv-id``; c10d under SLURM ``slurm-<job id>``), else a digest of the
    spec every node was given (identical launches without an id then share the directory)."""
    if spec.resume is not None and Path(spec.resume).is_dir():
        return str(spec.resume)
    if job_leaf is not None:  # a scheduler's job: slurm-<id>, k8s-<name> (islab.k8s.allocation)
        leaf = job_leaf
    elif slurm_job_id is not None:
        leaf = f"slurm-{slurm_job_id}"
    elif spec.nnodes > 1:
        leaf = spec.rendezvous.id or f"spec-{_shared_digest(spec)}"
    else:
        leaf = now.strftime(RUN_DIR_TIME_FORMAT)
    leaf = f"{leaf}_{spec.run_name}" if spec.run_name else leaf
    if spec.entrypoint is not None:  # <log_dir>/<lib>/<script stem | module | command>/<leaf>
        return str(PurePath(spec.log_dir, spec.lib, entry_label(spec.entrypoint), leaf))
    return str(PurePath(spec.log_dir, spec.lib, spec.task, leaf))


def _shared_digest(spec: RunSpec) -> str:
    """A digest of the fields every node must agree on (so what may differ per node, such as
    torchrun's process count or the env, does not split the directory)."""
    plain = spec.to_plain()
    shared = {}
    for name in shared_fields(launcher_of(spec.lib, spec.ml_framework)):
        section, _, key = name.rpartition(".")
        shared[name] = plain[section][key] if section else plain[key]
    return hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()[:10]


def entry_label(entrypoint: Mapping[str, str]) -> str:
    """A directory-safe name for an entry point: the script's stem, the module or the command."""
    ((kind, name),) = entrypoint.items()
    label = PurePath(name).stem if kind == "script" else PurePath(name).name
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in label) or kind


def entry_argv(spec: RunSpec) -> list[str]:
    """What follows torchrun's own options (or skrl's JAX launcher's) for a user entry point:
    ``PATH ARGS`` (run with the spec's python), ``-m NAME ARGS``, or ``--no-python NAME ARGS``."""
    assert spec.entrypoint is not None
    ((kind, name),) = spec.entrypoint.items()
    head = {"script": [name], "module": ["-m", name], "command": ["--no-python", name]}[kind]
    return [*head, *spec.args]


def worker_args(spec: RunSpec, run_dir: str) -> list[str]:
    """The worker command line of docs/ARCHITECTURE.md (after ``-m islab.worker`` / the script)."""
    return [
        "--lib", spec.lib,
        "--ml-framework", spec.ml_framework,
        "--task", spec.task,
        *(["--task-module", spec.task_module] if spec.task_module is not None else []),
        "--num-envs", str(spec.num_envs),
        "--seed", str(spec.seed),
        # the worker turns a budget into iterations once it knows the world size it got
        *(["--total-env-steps", str(spec.total_env_steps)] if spec.total_env_steps is not None
          else ["--max-iterations", str(spec.max_iterations)]),
        "--device", spec.device,
        "--run-dir", run_dir,
        "--distributed",
        "--checkpoint-interval", str(spec.checkpoint_interval),
        *(["--logger", spec.logger] if spec.logger != "tensorboard" else []),
        # a collective waits as long as the rendezvous does: a vanished node fails the job, not hangs it
        "--peer-timeout", str(spec.rendezvous.timeout_s),
        *(["--resume", spec.resume] if spec.resume is not None else []),
        *spec.overrides,
    ]  # fmt: skip


def budget_of(spec: RunSpec) -> Budget:
    """The job's sample budget. The world size is known here unless the node count is elastic;
    reading the agent config (for the rollout length) is a YAML read, no torch."""
    agent_cfg = load_agent_config(spec.lib, spec.task, spec.overrides)
    low = (spec.min_nnodes or spec.nnodes) * spec.nproc_per_node
    high = spec.nnodes * spec.nproc_per_node
    return Budget.of(
        spec.lib,
        agent_cfg,
        num_envs=spec.num_envs,
        world_size=(low, high),
        max_iterations=spec.max_iterations if spec.total_env_steps is None else None,
        total_env_steps=spec.total_env_steps,
    )


RUN_DIR_ENV = "ISLAB_RUN_DIR"


def plan_env(spec: RunSpec, run_dir: str = "") -> dict[str, str]:
    """Environment every rank of this plan gets on top of the node's own environment."""
    env = dict(spec.env)
    if spec.entrypoint is not None:  # a user's script learns where its job's run directory is
        env[RUN_DIR_ENV] = run_dir
    apply_env_fixes(spec.lib, spec.ml_framework, spec.device, env)  # the registry's fixes; the user's env wins
    return env


def _derive(spec: RunSpec, free_port: int) -> tuple[dict[str, str], int | None]:
    """Fill in what the spec left open. A free port is only used on a single node: nodes of a
    multi-node job cannot agree on a probed port, so they need an explicit one (or 29500)."""
    rdzv = spec.rendezvous
    single_node = spec.nnodes == 1
    if launcher_of(spec.lib, spec.ml_framework) == skrl_jax.NAME:
        coordinator = spec.coordinator_address or join_host_port(LOCALHOST, free_port)
        return {"coordinator_address": coordinator}, split_host_port(coordinator)[1]
    if rdzv.backend == "c10d":
        endpoint = rdzv.endpoint or join_host_port(LOCALHOST, free_port)
        return {"rendezvous.endpoint": endpoint, "rendezvous.id": rdzv.id or DEFAULT_C10D_ID}, None
    if rdzv.master_port is not None:
        port = rdzv.master_port
    else:
        port = free_port if single_node else DEFAULT_MULTINODE_MASTER_PORT
    derived = {"rendezvous.master_addr": rdzv.master_addr or LOCALHOST, "rendezvous.master_port": str(port)}
    return derived, port


# ----------------------------------------------------------------------------------------------
# The planner
# ----------------------------------------------------------------------------------------------


def build_plan(
    spec: RunSpec, *, now: datetime, free_port: int, slurm_job_id: int | None = None, job_leaf: str | None = None
) -> LaunchPlan:
    """Plan every node of ``spec`` (or only ``spec.node_rank`` when given).

    ``now`` (or, inside a SLURM allocation, ``slurm_job_id``) names the run directory; ``free_port``
    is used for a single-node rendezvous or JAX coordinator that the spec left open (the caller
    probes it; see ``supervise.find_free_port``).
    """
    run_dir = run_dir_for(spec, now, slurm_job_id, job_leaf)
    launcher = launcher_of(spec.lib, spec.ml_framework)
    derived, node0_port = _derive(spec, free_port)
    env = MappingProxyType(plan_env(spec, run_dir))
    worker = worker_args(spec, run_dir) if spec.entrypoint is None else entry_argv(spec)
    node_ranks = [spec.node_rank] if spec.node_rank is not None else list(range(spec.nnodes))
    nodes = []
    for node_rank in node_ranks:
        if launcher == skrl_jax.NAME:
            coordinator = derived["coordinator_address"]
            # Our worker in the module form, as in torchrun's commands: no path of this machine in a
            # command for another node. A user's entry point is a script: skrl's launcher runs PATH ARGS.
            program = ("-m", torchrun.WORKER_MODULE, *worker) if spec.entrypoint is None else tuple(worker)
            ranks = tuple(
                RankLaunch(
                    global_rank,
                    local_rank,
                    (spec.python, *program),
                    MappingProxyType({**env, **jax}),
                )
                for global_rank, local_rank, jax in skrl_jax.rank_envs(spec, node_rank, coordinator)
            )
            argv = skrl_jax.node_argv(spec, node_rank, coordinator, program)
            nodes.append(NodePlan(node_rank, argv, env, ranks))
        else:
            nodes.append(NodePlan(node_rank, torchrun.node_argv(spec, node_rank, derived, worker), env))
    if spec.hang_timeout_s is None and spec.entrypoint is None:
        derived = {**derived, "hang_timeout_s": str(hang_timeout_of(spec))}
    address, kind = _meeting_point(derived)
    return LaunchPlan(
        launcher=launcher,
        run_dir=run_dir,
        nodes=tuple(nodes),
        derived=MappingProxyType({**derived, "run_dir": run_dir}),
        node0_port=node0_port,
        rendezvous_address=address,
        rendezvous_kind=kind,
        rendezvous_timeout_s=spec.rendezvous.timeout_s,
        nnodes=spec.nnodes,
        budget=budget_of(spec) if spec.entrypoint is None else None,
        entrypoint=spec.entrypoint is not None,
        # Isaac Lab's train.py writes <cwd>/logs/<lib>/...; a user's script, under ISLAB_RUN_DIR
        events_root=str(tensorboard_root(spec.lib, Path.cwd())) if spec.isaaclab or spec.mjlab else run_dir,
        events_library=spec.lib if spec.isaaclab or spec.mjlab else None,  # mjlab: <cwd>/logs/rsl_rl
        events_not_before=now.timestamp() - 1 if spec.entrypoint is not None else None,
        hang_timeout_s=hang_timeout_of(spec),
    )


def _meeting_point(derived: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(host:port, kind) where the nodes meet: static master, c10d endpoint or JAX coordinator."""
    if "coordinator_address" in derived:
        return derived["coordinator_address"], "JAX coordinator"
    if "rendezvous.endpoint" in derived:
        return derived["rendezvous.endpoint"], "c10d endpoint"
    if "rendezvous.master_addr" in derived:
        address = join_host_port(derived["rendezvous.master_addr"], int(derived["rendezvous.master_port"]))
        return address, "static master"
    return None, None


# ----------------------------------------------------------------------------------------------
# Printing (the dry run)
# ----------------------------------------------------------------------------------------------


def shell_line(argv: tuple[str, ...] | list[str], env: Mapping[str, str]) -> str:
    """``NAME=value … cmd args`` that bash runs as-is, on one line whatever an argument holds;
    secret-looking values masked."""
    prefix = [f"{name}={shell_quote(value)}" for name, value in mask_env(env).items()]
    return " ".join([*prefix, shell_join(argv)])


def format_json(plan: LaunchPlan) -> str:
    """The machine-readable dry run: launcher, and per node the full argv and the added env."""
    payload = {
        "launcher": plan.launcher,
        "budget": plan.budget.to_plain() if plan.budget is not None else None,
        "nodes": [
            {"node_rank": node.node_rank, "argv": list(node.argv), "env": mask_env(node.env)} for node in plan.nodes
        ],
    }
    return json.dumps(payload, indent=2)


def _comment_value(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}" if value else "{}"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) if value else "[]"
    return "-" if value is None else str(value)


def format_text(plan: LaunchPlan, resolved: ResolvedSpec) -> str:
    """The human dry run: a comment block saying where each value came from, then per node the
    command. Every non-command line is a shell comment, so the whole output can be pasted."""
    spec = resolved.spec
    lines = [
        comment(
            f"islab-train plan: {plan.launcher}, {spec.nnodes_text.replace(':', '-')} node(s) x "
            f"{spec.nproc_per_node} process(es) on {spec.device}, world size "
            f"{'up to ' if spec.elastic else ''}{spec.nnodes * spec.nproc_per_node}"
        ),
        comment(f"run dir: {plan.run_dir}"),
        *(
            [comment(f"budget: {plan.budget.describe(resuming=spec.resume is not None)}")]
            if plan.budget is not None
            else []
        ),
        comment("resolved spec (field = value  (source: cli|env|file|default)):"),
    ]
    if resolved.cluster_file:
        lines.append(comment(f"  cluster file: {resolved.cluster_file}"))
    rows = resolved.explain()
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        if (name in WORKER_ONLY_FIELDS) if spec.entrypoint is not None else name in ("entrypoint", "args"):
            continue  # a user entry point ignores the worker's fields; the worker has no entry point
        origin = resolved.origins.get(name)
        detail = f"source: {source.value}" + (f", {origin}" if origin and source.value != "file" else "")
        if value is None and name in plan.derived:
            value, detail = plan.derived[name], f"{detail}, chosen by the planner"
        elif name == "max_iterations" and spec.total_env_steps is not None:
            detail = f"{detail}, derived from total_env_steps by each run"
        lines.append(comment(f"  {name.ljust(width)} = {_comment_value(value)}  ({detail})"))
    if plan.launcher == skrl_jax.NAME:
        lines.append(
            comment(
                "note: a real launch starts these ranks itself (same JAX_* variables as skrl's "
                "launcher) so that a failing rank fails the run"
            )
        )
    for node in plan.nodes:
        lines.append(comment(f"node {node.node_rank}"))
        lines.append(shell_line(node.argv, node.env))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Can this node launch it? (pure: the machine's facts come in as arguments)
# ----------------------------------------------------------------------------------------------


def launch_issues(spec: RunSpec, *, platform: str, visible_gpus: int) -> list[Issue]:
    """Reasons a *real* launch of ``spec`` cannot start on this node (a dry run skips these).
    The doctor shows the platform and GPU ones as its rows; it does not check them again."""
    found = (platform_issue(spec.device, platform), node_rank_issue(spec), gpu_issue(spec, visible_gpus))
    return [issue for issue in found if issue is not None]


def platform_issue(device: str, platform: str) -> Issue | None:
    if not platform.startswith(("win", "cygwin")):
        return None
    if device == "cuda":
        return Issue(
            "device",
            "GPU training needs NCCL, which only exists on Linux",
            "Run on a Linux machine or in WSL2; --dry-run still prints the plan here",
        )
    return Issue(
        "platform",
        "islab-train supervises ranks with POSIX process groups and signals, which Windows lacks",
        "Run it in WSL2 (CPU ranks over gloo work there); --dry-run still prints the plan here",
    )


def node_rank_issue(spec: RunSpec) -> Issue | None:
    """Each node starts its own launcher and must know which node it is -- except with torchrun's
    c10d rendezvous, where torchrun assigns the node ranks."""
    assigned = launcher_of(spec.lib, spec.ml_framework) == torchrun.NAME and spec.rendezvous.backend == "c10d"
    if spec.nnodes == 1 or assigned or spec.node_rank is not None:
        return None
    return Issue(
        "node_rank",
        f"this is a {spec.nnodes}-node run and each node starts its own launcher, "
        "but this one was not told which node it is",
        "Pass --node-rank 0 on the first node, --node-rank 1 on the second, and so on "
        "(--dry-run prints every node's command)",
    )


def gpu_issue(spec: RunSpec, visible_gpus: int) -> Issue | None:
    if spec.device != "cuda":
        return None
    if visible_gpus == 0:
        return Issue(
            "device",
            "cuda was asked for but no CUDA device is visible on this machine (CUDA_VISIBLE_DEVICES / nvidia-smi)",
            f"Use --device cpu --nproc {spec.nproc_per_node} for CPU ranks over gloo",
        )
    if spec.nproc_per_node > visible_gpus:
        return Issue(
            "nproc_per_node",
            f"{spec.nproc_per_node} GPU processes per node need {spec.nproc_per_node} GPUs "
            f"but {visible_gpus} are visible to the ranks (CUDA_VISIBLE_DEVICES from the spec's env: or this "
            "shell), so ranks would share a GPU",
            f"Use --gpus {visible_gpus}, or --device cpu --nproc {spec.nproc_per_node}",
        )
    return None
