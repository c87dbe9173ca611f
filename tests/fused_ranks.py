"""Two real gloo ranks on CPU (torch.multiprocessing) training library adapters with one
``ISLAB_SYNC`` mode, from a fixed seed; tests/libs/test_fused_sync.py runs it once per mode and compares.
Every ``torch.distributed`` collective is counted in-process (the bench probe's list of them).

A library's ``run`` with ``preemption`` gets the worker's checkpointer and its per-iteration
preemption agreement (a collective, unless the library path folds it into one of its own).

Result per rank (``<out>/<mode>/rank_<r>.pt``, weights_only), per library: the policy state, the
collective calls of each iteration after the first (and the names in the last one), the learning
rate after each iteration, and whether the adapter took the fused path; for rl_games' fused path
also each minibatch's KL, this rank's own and the reduced one its schedule then reads (``kls``).
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASK = "Islab-Cartpole-v0"


def count_collectives(counter: list[int], names: list[str]) -> None:
    """Wrap every torch.distributed collective so each call adds 1 to ``counter[0]`` and its name to ``names``."""
    sys.path.insert(0, str(ROOT / "scripts" / "bench_hooks"))
    import torch.distributed as dist
    from _islab_bench_probe import COLLECTIVES  # the bench's own list: one home

    for name in COLLECTIVES:
        function = getattr(dist, name, None)
        if function is None:
            continue

        @functools.wraps(function)
        def counted(*args: Any, _function: Any = function, **kwargs: Any) -> Any:
            counter[0] += 1
            names.append(_function.__name__)
            return _function(*args, **kwargs)

        setattr(dist, name, counted)


def learning_rate(adapter: Any) -> float:
    """The rate the optimizer will use next (every library keeps it in its param groups)."""
    if adapter.name == "rsl_rl":
        return float(adapter.runner.alg.optimizer.param_groups[0]["lr"])
    if adapter.name == "rl_games":
        return float(adapter.agent.optimizer.param_groups[0]["lr"])
    if hasattr(adapter.agent, "policy_learning_rate"):  # skrl-JAX keeps its rates itself
        return float(adapter.agent.policy_learning_rate)
    return float(adapter.agent.optimizer.param_groups[0]["lr"])


def record_rl_games_kls(kls: list[tuple[float, float]]) -> None:
    """Every fused rl_games minibatch appends (this rank's KL, the KL the agent keeps after the
    all-reduce): the KL enters the reduction beside the gradients, the agent reads it back."""
    import islab.libs.rl_games_fused as fused

    reduce, step = fused.all_reduce_gradients_and, fused.FusedSyncA2CAgent.trancate_gradients_and_step
    local: list[float] = []

    def reducing(grads: Any, extras: Any, world_size: int) -> Any:
        local.append(float(extras[0]))
        return reduce(grads, extras, world_size)

    def stepping(self: Any) -> Any:
        fused_now = self._fused_now
        result = step(self)
        if fused_now:
            kls.append((local.pop(), float(self._fused_kl)))
        return result

    fused.all_reduce_gradients_and = reducing
    fused.FusedSyncA2CAgent.trancate_gradients_and_step = stepping


def track_iterations(adapter: Any, counter: list[int], marks: list[int], rates: list[float]) -> None:
    """At every iteration's report: the collective count so far and the learning rate."""
    report = adapter.report_iteration

    def reported(*args: Any, **kwargs: Any) -> None:
        marks.append(counter[0])
        rates.append(learning_rate(adapter))
        report(*args, **kwargs)

    adapter.report_iteration = reported


def train_one(ctx: Any, lib: str, run: dict[str, Any], out_dir: Path, counter: list[int], names: list[str]) -> dict:
    import torch

    from islab.envs import make_env
    from islab.libs import load_adapter
    from islab.spec.agent_config import load_agent_config
    from islab.worker.context import configure_process

    configure_process(ctx)  # the same seeds in both modes
    torch.set_num_threads(1)
    env = make_env(TASK, run["num_envs"], ctx.device, seed=ctx.seed)
    agent_cfg = load_agent_config(lib, TASK, tuple(run.get("overrides", ())))
    kls: list[tuple[float, float]] = []
    if lib == "rl_games":
        record_rl_games_kls(kls)
    adapter = load_adapter(lib, run.get("framework", "torch"))(ctx, env, agent_cfg, out_dir / lib)
    if run.get("preemption"):
        # What the worker attaches: a checkpointer whose StopRequest the ranks agree on every iteration.
        from islab.worker.checkpoint import Checkpointer, identity
        from islab.worker.collectives import collective_for
        from islab.worker.preemption import StopRequest

        run_identity = identity(lib, run.get("framework", "torch"), TASK, (4,), (1,))
        adapter.checkpointer = Checkpointer(
            collective_for(ctx), out_dir / lib, run_identity, {}, interval=0, stop=StopRequest()
        )
    marks: list[int] = []
    rates: list[float] = []
    track_iterations(adapter, counter, marks, rates)
    adapter.train(run["iterations"])
    return {
        "state": {k: torch.as_tensor(v).detach().clone() for k, v in adapter.policy_state().items()},
        "calls": [b - a for a, b in itertools.pairwise(marks)],
        "names": names[marks[-2] : marks[-1]] if len(marks) > 1 else [],
        "rates": rates,
        "fused": bool(adapter.fused_sync),
        "kls": kls,
    }


def count_jax_collectives(counter: list[int], names: list[str]) -> None:
    """skrl-JAX's collectives all go through islab's two cached pmaps: count their calls."""
    import islab.libs.skrl_jax_collectives as module

    for name in ("psum_across_processes", "all_gather_across_processes"):
        build = getattr(module, name)

        def counting(_build: Any = build, _name: str = name) -> Any:
            pmapped = _build()

            def call(*args: Any, **kwargs: Any) -> Any:
                counter[0] += 1
                names.append(_name)
                return pmapped(*args, **kwargs)

            return call

        setattr(module, name, counting)


def rank_main(rank: int, world: int, port: int, job: dict[str, Any]) -> None:
    os.environ.update(GIT_PYTHON_REFRESH="quiet", ISLAB_SYNC=job["mode"])
    jax_ranks = job.get("framework") == "jax"
    if jax_ranks:  # what skrl's JAX launcher exports; skrl joins jax.distributed at import
        os.environ.update(
            JAX_RANK=str(rank),
            JAX_LOCAL_RANK=str(rank),
            JAX_WORLD_SIZE=str(world),
            JAX_COORDINATOR_ADDR="127.0.0.1",
            JAX_COORDINATOR_PORT=str(port),
            JAX_PLATFORMS="cpu",
            XLA_PYTHON_CLIENT_PREALLOCATE="false",
        )
    else:
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
        )
    counter: list[int] = [0]
    names: list[str] = []
    count_collectives(counter, names)
    import torch

    from islab.worker.context import RankContext, init_process_group

    ctx = RankContext.from_environ("cpu", job["seed"])
    if jax_ranks:
        count_jax_collectives(counter, names)
    else:
        init_process_group(ctx)
    out_dir = Path(job["out"]) / job["mode"]
    # The libraries train one after the other in the same order in both modes: a library's run
    # starts from the process state the previous ones left (skrl's imports seed, for one).
    out = {lib: train_one(ctx, lib, run, out_dir, counter, names) for lib, run in job["libs"].items()}
    torch.save(out, out_dir / f"rank_{rank}.pt")
    if not jax_ranks:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def run_two_ranks(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Spawn 2 ranks running ``job`` (``mode``: stock or fused); return each rank's result dict."""
    import torch
    import torch.multiprocessing as mp
    from ports import port_for_a_child

    mp.spawn(rank_main, args=(2, port_for_a_child(), job), nprocs=2, join=True)
    out_dir = Path(job["out"]) / job["mode"]
    return [torch.load(out_dir / f"rank_{r}.pt", weights_only=True) for r in (0, 1)]
