"""Timers inside a worker rank, for ``scripts/bench.py`` (installed by this folder's sitecustomize).

Wraps, before the worker imports any RL library:

* the env's ``step`` (on the instance ``islab.envs.make_env`` returns, so every task is timed: our
  ``DirectRLEnv`` subclasses and bridges such as ``MjlabEnv``, which is not one): every env step's
  start and duration (the env share of an iteration);
* ``torch.distributed`` collectives (``all_reduce``, ``broadcast``, ``all_gather``, ...): start and
  duration of each call, as the library sees it, i.e. including the wait for the slowest rank;
* skrl-JAX's collectives (JAX, not torch): ``Model.broadcast_parameters`` and islab's cached
  psum / all_gather pmaps, blocking on the result so the time is not hidden by JAX's async dispatch;
* ``LibraryAdapter.report_iteration``: the end time of every training iteration, and the CPU time
  this process has used by then (``time.process_time()``: CPU use per rank = CPU time / wall time;
  a rank that waits in a collective, or is not scheduled, uses less than 1).

At exit it writes ``<ISLAB_BENCH_TIMINGS>/rank_<R>.json``. All times are ``time.perf_counter()``
seconds of this process. The overhead is two clock reads per wrapped call, and on a CUDA rank two
``torch.cuda.synchronize()``: a kernel or an NCCL collective returns as soon as it is queued, so
without them an NCCL all_reduce reads ~0 and its time (and any queued compute) lands in whatever
waits next, e.g. the env step, inflating the env share. The syncs serialize the timed calls with
the GPU, which is what attributing time to them means.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RECORDS: dict[str, list[Any]] = {"env_step": [], "collective": [], "iteration_end": [], "iteration_cpu": []}
COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "broadcast_object_list",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "barrier",
)


def synchronize_cuda() -> None:
    """Wait for this process's queued CUDA work, when it uses CUDA (see the module docstring)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _timed(function: Callable[..., Any], bucket: str, name: str, block: bool = False) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        synchronize_cuda()  # queued work before the call is not the call's
        start = time.perf_counter()
        result = function(*args, **kwargs)
        if block:
            import jax

            result = jax.block_until_ready(result)
        synchronize_cuda()  # the call's kernels / NCCL transfer have finished
        RECORDS[bucket].append((start, time.perf_counter() - start, name))
        return result

    wrapper.__islab_bench_timed__ = True  # type: ignore[attr-defined]
    return wrapper


def _patch_skrl_jax() -> None:
    """skrl-JAX's collectives: ``Model.broadcast_parameters`` (skrl's own, at start), the host-level
    ``process_allgather`` / ``broadcast_one_to_all`` of ``jax.experimental.multihost_utils`` (islab's
    preemption vote once per iteration, checkpoint agreement) and islab's two cached pmaps (every
    gradient psum, stock or fused, the KL psum and the normalizer all_gather go through them;
    ``Model.reduce_parameters`` is islab's call of the psum, so it is not timed twice)."""
    import sys

    module = sys.modules.get("skrl.models.jax.base")
    islab_jax = sys.modules.get("islab.libs.skrl_jax_collectives")
    if module is None or islab_jax is None:
        return
    model = module.Model
    current = model.broadcast_parameters
    if not getattr(current, "__islab_bench_timed__", False):
        model.broadcast_parameters = _timed(current, "collective", "jax.broadcast_parameters", block=True)
    # islab's own host-level agreements (the per-iteration preemption vote, islab.worker.collectives)
    from jax.experimental import multihost_utils

    for name in ("process_allgather", "broadcast_one_to_all"):
        current = getattr(multihost_utils, name)
        if not getattr(current, "__islab_bench_timed__", False):
            setattr(multihost_utils, name, _timed(current, "collective", f"jax.{name}"))
    for name in ("psum_across_processes", "all_gather_across_processes"):
        build = getattr(islab_jax, name)
        if getattr(build, "__islab_bench_timed__", False):
            continue
        timed_build = functools.cache(lambda build=build, name=name: _timed(build(), "collective", f"jax.{name}", True))
        timed_build.__islab_bench_timed__ = True  # type: ignore[attr-defined]
        setattr(islab_jax, name, timed_build)


def install(out_dir: str) -> None:
    import torch.distributed as dist

    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _timed(getattr(dist, name), "collective", name))

    import islab.envs
    from islab.libs.base import LibraryAdapter

    make_env = islab.envs.make_env

    @functools.wraps(make_env)
    def make_timed_env(*args: Any, **kwargs: Any) -> Any:
        env = make_env(*args, **kwargs)
        env.step = _timed(env.step, "env_step", "env.step")
        return env

    islab.envs.make_env = make_timed_env  # the worker imports it at call time, after this

    report_iteration = LibraryAdapter.report_iteration

    @functools.wraps(report_iteration)
    def timed_report(self: LibraryAdapter, *args: Any, **kwargs: Any) -> None:
        RECORDS["iteration_end"].append(time.perf_counter())
        RECORDS["iteration_cpu"].append(time.process_time())
        report_iteration(self, *args, **kwargs)

    LibraryAdapter.report_iteration = timed_report  # type: ignore[method-assign]

    original_init = LibraryAdapter.__init__

    @functools.wraps(original_init)
    def init(self: LibraryAdapter, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _patch_skrl_jax()  # the skrl-JAX adapter module (and its pmap fix) is imported by now

    LibraryAdapter.__init__ = init  # type: ignore[method-assign]

    def dump() -> None:
        rank = os.environ.get("RANK") or os.environ.get("JAX_RANK") or "0"
        path = Path(out_dir) / f"rank_{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rank": int(rank), "pid": os.getpid(), **RECORDS}), encoding="utf-8")

    atexit.register(dump)
