"""The planner: a :class:`~islab.spec.run_spec.RunSpec` turned into the exact commands each node runs.

The plan's shape (nodes, ranks, launchers, rendezvous) is :mod:`islab.plan.launch_plan`.

Which launcher a library uses is the library registry's one decision
(:attr:`RunSpec.launcher <islab.spec.run_spec.RunSpec.launcher>`), recorded in :attr:`LaunchPlan.launcher`; the
launcher's own module writes its command (:mod:`islab.plan.torchrun`,
:mod:`islab.plan.skrl_jax`) and everything later reads the plan.

Everything in this module is a pure function of its inputs -- the spec (with the agent config's
rollout length that resolution read for the budget), the clock and a port the caller found free --
so the same inputs always give the same plan and tests need no machine state.
Probing ports, counting GPUs and starting processes happen at the edges (:mod:`islab.doctor.probes`,
:mod:`islab.run.supervise`). No torch import here, and nothing from the rank side.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path, PurePath
from types import MappingProxyType

from islab import rundir
from islab.libs.registry import adapter_module, apply_env_fixes
from islab.plan import skrl_jax, torchrun
from islab.plan.launch_plan import LaunchPlan, NodePlan, RankLaunch
from islab.resolve.isaaclab import tensorboard_root
from islab.resolve.isaaclab3 import RUN_TIMESTAMP_FORMAT, is_isaaclab3_entry, with_run_timestamp
from islab.resolve.isaaclab_resume import option_value
from islab.resolve.job import JobIdentity
from islab.resolve.layers import Source
from islab.resolve.resolved import ResolvedSpec
from islab.spec.addresses import join_host_port, split_host_port
from islab.spec.budget import Budget
from islab.spec.dotted import field_value
from islab.spec.fields import (
    DEFAULT_C10D_ID,
    DEFAULT_MULTINODE_MASTER_PORT,
    JAX_INIT_TIMEOUT_S,
    TORCHRUN_C10D_JOIN_TIMEOUT_S,
    TORCHRUN_STATIC_RDZV_TIMEOUT_S,
)
from islab.spec.launch_rules import shared_fields
from islab.spec.run_spec import RunSpec
from islab.spec.worker_args import to_argv, values_from

LOCALHOST = "127.0.0.1"
RUN_DIR_TIME_FORMAT = "%Y-%m-%d_%H-%M-%S"
TO_TARGET_TEXT = (
    "resuming finishes the run's original target (--max-iterations M or --total-env-steps N with --resume: M / N more)"
)
# The default hang timeout: never shorter than the waits a healthy job may have -- a collective
# waits up to the rendezvous timeout T for a slow peer, an elastic restart up to T for the nodes to
# join again, so twice T -- and never under ten minutes, since killing a healthy job costs more
# than noticing a hung one a few minutes late (docs/CLI.md, "Hangs").
HANG_TIMEOUT_RDZV_FACTOR = 2
MIN_DEFAULT_HANG_TIMEOUT_S = 600


def default_hang_timeout(rdzv_timeout_s: int) -> int:
    return max(HANG_TIMEOUT_RDZV_FACTOR * rdzv_timeout_s, MIN_DEFAULT_HANG_TIMEOUT_S)


def rendezvous_timeout_of(spec: RunSpec) -> int:
    """Seconds the nodes wait for each other: the user's ``rendezvous.timeout_s``, else the
    launcher's own default (torchrun static 900 s, c10d join 600 s, JAX 300 s) -- which the
    launcher then applies itself, as islab passes no timeout in that case."""
    if spec.rendezvous.timeout_s is not None:
        return spec.rendezvous.timeout_s
    if spec.launcher == skrl_jax.NAME:
        return JAX_INIT_TIMEOUT_S
    return TORCHRUN_C10D_JOIN_TIMEOUT_S if spec.rendezvous.backend == "c10d" else TORCHRUN_STATIC_RDZV_TIMEOUT_S


def hang_timeout_of(spec: RunSpec) -> int:
    """Seconds without progress before the job counts as hung; 0: not watched. Our worker reports
    every iteration (heartbeats); Isaac Lab's and mjlab's trainers through their TensorBoard events
    (:mod:`islab.run.event_hangs`), watched by default too; a user's entry point only when
    ``--hang-timeout`` is given (a script may well stop writing events for a long evaluation)."""
    if spec.hang_timeout_s is not None:
        return spec.hang_timeout_s
    if spec.entrypoint is not None and spec.isaaclab is None and not spec.mjlab:
        return 0
    return default_hang_timeout(rendezvous_timeout_of(spec))


# ----------------------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------------------


def run_dir_for(spec: RunSpec, now: datetime, job_leaf: str | None = None) -> str:
    """``<log_dir>/<lib>/<task>/<leaf>[_<run_name>]`` (other entry points: :func:`what_ran`) -- chosen
    once, for all ranks; or the run directory being resumed, so a resumed run keeps its logs and
    checkpoints together.

    A scheduler job's leaf (``job_leaf``: ``slurm-<job id>``, ``k8s-<name>``, :mod:`islab.resolve.job`)
    is known to every node, and a requeued job (same id) finds its own run directory again and resumes
    from its checkpoint (:mod:`islab.worker.resume`).
    Otherwise, one node: the leaf is the launch time (``YYYY-mm-dd_HH-MM-SS``). Several nodes plan the
    directory each on its own, so its name must come from what they share, not from each node's
    clock: the rendezvous id (``--rdzv-id``; c10d under SLURM ``slurm-<job id>``), else a digest of the
    spec every node was given (identical launches without an id then share the directory)."""
    continued = rundir.continued_run_dir(spec.resume)
    if continued is not None:
        return continued
    if job_leaf is not None:  # a scheduler's job: slurm-<id>, k8s-<name> (islab.k8s.allocation)
        leaf = job_leaf
    elif spec.nnodes > 1:
        leaf = spec.rendezvous.id or f"spec-{_shared_digest(spec)}"
    else:
        leaf = now.strftime(RUN_DIR_TIME_FORMAT)
    leaf = f"{leaf}_{spec.run_name}" if spec.run_name else leaf
    return str(PurePath(spec.log_dir, *what_ran(spec), leaf))


def what_ran(spec: RunSpec) -> tuple[str, str]:
    """The two directory levels between ``log_dir`` and a run's leaf, named by what ran: our worker
    ``<lib>/<task>``; Isaac Lab's train.py ``isaaclab-<lib>/<task>`` (one script per library, as
    Isaac Lab's own ``logs/<lib>/``); mjlab's train ``mjlab/<task>``; a user's entry point
    ``script/<stem>``, ``module/<name>`` or ``command/<name>`` -- the library only picks the
    launcher there, so it would name nothing that ran."""
    if spec.entrypoint is None:
        return spec.lib, spec.task
    if spec.isaaclab is not None:
        return f"isaaclab-{spec.lib}", _directory_safe(option_value(spec.args, "--task") or "task")
    if spec.mjlab:  # the preset puts mjlab's task id first
        return "mjlab", _directory_safe(spec.args[0] if spec.args else "task")
    ((kind, _),) = spec.entrypoint.items()
    return kind, entry_label(spec.entrypoint)


def _directory_safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name).lstrip(".") or "_"


def _shared_digest(spec: RunSpec) -> str:
    """A digest of the fields every node must agree on (so what may differ per node, such as
    torchrun's process count or the env, does not split the directory)."""
    return hashlib.sha256(json.dumps(shared_values(spec), sort_keys=True, default=str).encode()).hexdigest()[:10]


def shared_values(spec: RunSpec) -> dict[str, object]:
    """``{dotted field: value}`` of the fields every node must agree on (JSON-ready)."""
    plain = spec.to_plain()
    shared = {}
    for name in shared_fields(spec.launcher):
        shared[name] = field_value(plain, name)
    return json.loads(json.dumps(shared, default=str))


def entry_label(entrypoint: Mapping[str, str]) -> str:
    """A directory-safe name for an entry point: the script's stem, the module or the command."""
    ((kind, name),) = entrypoint.items()
    label = PurePath(name).stem if kind == "script" else PurePath(name).name
    return _directory_safe(label) if label else kind


def entry_argv(spec: RunSpec, now: datetime | None = None) -> list[str]:
    """What follows torchrun's own options (or skrl's JAX launcher's) for a user entry point:
    ``PATH ARGS`` (run with the spec's python), ``-m NAME ARGS``, or ``--no-python NAME ARGS``.
    Isaac Lab 3's trainer also gets the launch time ``now`` as its run timestamp, as its own launcher
    does (one run folder for all ranks: :func:`islab.resolve.isaaclab3.with_run_timestamp`)."""
    assert spec.entrypoint is not None
    ((kind, name),) = spec.entrypoint.items()
    head = {"script": [name], "module": ["-m", name], "command": ["--no-python", name]}[kind]
    args: tuple[str, ...] = spec.args
    if spec.isaaclab is not None and kind == "script" and is_isaaclab3_entry(name) and now is not None:
        args = with_run_timestamp(args, now.strftime(RUN_TIMESTAMP_FORMAT))
    return [*head, *args]


def resumes_to_target(resolved: ResolvedSpec) -> bool:
    """One rule for continuing a run: ``--resume`` alone finishes the run's original target (the
    checkpoint records it, as a SLURM requeue or an elastic restart does); a ``--max-iterations`` /
    ``--total-env-steps`` given now (command line, ``ISLAB_*``, cluster file) says how many more.
    The resumed run's own stored length (source ``resumed``) and the defaults are not "given now"."""
    given = {resolved.sources.get(name) for name in ("max_iterations", "total_env_steps")}
    return resolved.spec.resume is not None and not given & {Source.CLI, Source.ENV, Source.FILE}


def program_of(
    spec: RunSpec, run_dir: str, *, to_target: bool = False, now: datetime | None = None, job: JobIdentity | None = None
) -> tuple[str, ...]:
    """What each rank runs, after torchrun's options (or as ``python PROGRAM`` for skrl-JAX ranks):
    ``-m islab.worker ARGS`` -- the module form, so no path of this machine is in a command for
    another node -- or the user's entry point (:func:`entry_argv`, launched at ``now``)."""
    if spec.entrypoint is not None:
        return tuple(entry_argv(spec, now))
    return ("-m", torchrun.WORKER_MODULE, *worker_args(spec, run_dir, to_target=to_target, job=job))


def worker_args(spec: RunSpec, run_dir: str, *, to_target: bool = False, job: JobIdentity | None = None) -> list[str]:
    """The worker command line of docs/ARCHITECTURE.md (after ``-m islab.worker`` / the script),
    written from the one table of worker arguments (:mod:`islab.spec.worker_args`). ``to_target``:
    resuming alone, so no length (the worker trains to the checkpoint's target)."""
    values = values_from(
        spec.model_dump(), run_dir=run_dir, distributed=True, peer_timeout=rendezvous_timeout_of(spec),
        scheduler_job=job.run_leaf if job is not None else None, job_restart=job.restart if job is not None else None,
    )  # fmt: skip
    if to_target:
        values["max_iterations"] = values["total_env_steps"] = None
    return to_argv(values)


def budget_of(spec: RunSpec) -> Budget | None:
    """The job's sample budget. The world size is known here unless the node count is elastic; the
    rollout length is the agent config's, which resolution read (:meth:`RunSpec.with_rollout_length`):
    a spec built in code without it has no budget."""
    if spec.rollout_length is None:
        return None
    low = (spec.min_nnodes or spec.nnodes) * spec.nproc_per_node
    high = spec.nnodes * spec.nproc_per_node
    return Budget.of_rollout(
        spec.rollout_length,
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
    if spec.launcher == skrl_jax.NAME:
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
    spec: RunSpec,
    *,
    now: datetime,
    free_port: int,
    job: JobIdentity | None = None,
    to_target: bool = False,
    run_dir: str | None = None,
) -> LaunchPlan:
    """Plan every node of ``spec`` (or only ``spec.node_rank`` when given).

    ``now`` (or the scheduler ``job``, :mod:`islab.resolve.job`) names the run directory; the job is
    also told to the ranks (``--scheduler-job``, ``--job-restart``: what a restart resumes); ``free_port``
    is used for a single-node rendezvous or JAX coordinator that the spec left open (the caller
    probes it; see ``supervise.find_free_port``). ``to_target``: ``--resume`` alone
    (:func:`resumes_to_target`), which trains to the run's original target. ``run_dir``: the
    directory a real launch claimed (:func:`islab.rundir.claim_new_dir`: ``<leaf>-2`` when another
    launch took ``run_dir_for``'s name in the same second); default :func:`run_dir_for`.
    """
    run_dir = run_dir or run_dir_for(spec, now, job_leaf=job.run_leaf if job is not None else None)
    launcher = spec.launcher
    derived, node0_port = _derive(spec, free_port)
    env = MappingProxyType(plan_env(spec, run_dir))
    program = program_of(spec, run_dir, to_target=to_target, now=now, job=job)
    node_ranks = [spec.node_rank] if spec.node_rank is not None else list(range(spec.nnodes))
    nodes = []
    for node_rank in node_ranks:
        if launcher == skrl_jax.NAME:
            coordinator = derived["coordinator_address"]
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
            nodes.append(NodePlan(node_rank, torchrun.node_argv(spec, node_rank, derived, program), env))
    if spec.rendezvous.timeout_s is None:
        derived = {**derived, "rendezvous.timeout_s": str(rendezvous_timeout_of(spec))}
    if spec.hang_timeout_s is None and hang_timeout_of(spec):
        derived = {**derived, "hang_timeout_s": str(hang_timeout_of(spec))}
    address, kind = _meeting_point(derived)
    return LaunchPlan(
        launcher=launcher,
        run_dir=run_dir,
        nodes=tuple(nodes),
        program=program,
        derived=MappingProxyType({**derived, "run_dir": run_dir}),
        node0_port=node0_port,
        rendezvous_address=address,
        rendezvous_kind=kind,
        rendezvous_timeout_s=rendezvous_timeout_of(spec),
        nnodes=spec.nnodes,
        budget=budget_of(spec) if spec.entrypoint is None and not to_target else None,
        to_target=to_target,
        entrypoint=spec.entrypoint is not None,
        # Isaac Lab's train.py writes <cwd>/logs/<lib>/...; a user's script, under ISLAB_RUN_DIR
        events_root=str(tensorboard_root(spec.lib, Path.cwd())) if spec.isaaclab or spec.mjlab else run_dir,
        events_library=spec.lib if spec.isaaclab or spec.mjlab else None,  # mjlab: <cwd>/logs/rsl_rl
        events_not_before=now.timestamp() - 1 if spec.entrypoint is not None else None,
        hang_timeout_s=hang_timeout_of(spec),
        isaaclab=spec.isaaclab is not None,
        forked_ranks=forked_ranks(spec),
        rank_imports=rank_imports(spec),
        overrides=tuple(spec.overrides),
    )


def forked_ranks(spec: RunSpec) -> bool:
    """Ranks forked from torchrun's agent (:mod:`islab.plan.torchrun`): our worker on CPU ranks,
    unless the user chose torchrun's start method."""
    return spec.launcher == torchrun.NAME and spec.entrypoint is None and spec.device == "cpu" and not spec.start_method


def rank_imports(spec: RunSpec) -> tuple[str, ...]:
    """What torchrun's agent imports before it forks the ranks: the library's adapter module (its
    library, and ``torch._dynamo`` through it), imported once instead of once per rank."""
    if not forked_ranks(spec):
        return ()
    return (adapter_module(spec.lib, spec.ml_framework),)


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
