"""The pre-flight probe of a skrl-JAX job: ``jax.distributed`` and a ``psum`` across processes.

skrl's JAX launcher starts the ranks with ``JAX_RANK``, ``JAX_LOCAL_RANK``, ``JAX_WORLD_SIZE`` and
``JAX_COORDINATOR_ADDR``/``_PORT``; ``import skrl`` would join ``jax.distributed`` from them. The
probe joins the same way skrl does (same coordinator, process id and local device), without
importing skrl, then does what the torch probe does with JAX's collectives: identities gathered
with ``process_allgather``, sums with a ``pmap``-ed ``psum`` over every process's device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from islab.preflight.identity import identity
from islab.preflight.report import PROBLEM_EXIT, build_report, done_line, identity_problems, write_report
from islab.spec.sync_cost import ring_bytes

IDENTITY_BYTES = 4096  # identities travel as fixed-size byte rows (process_allgather needs one shape)
JAX_SIZES_BYTES = (4, 4_194_304)  # each new shape compiles the psum again (seconds on CPU)


def _gather_identities(mine: dict[str, Any]) -> list[dict[str, Any]]:
    import numpy as np
    from jax.experimental import multihost_utils

    row = np.zeros(IDENTITY_BYTES, dtype=np.uint8)
    raw = json.dumps(mine).encode()[:IDENTITY_BYTES]
    row[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    rows = np.asarray(multihost_utils.process_allgather(row))
    return [json.loads(bytes(r).rstrip(b"\0").decode()) for r in rows.reshape(-1, IDENTITY_BYTES)]


def jax_probe(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp

    from islab.worker.context import RankContext

    started = time.perf_counter()
    rank, world = int(os.environ["JAX_RANK"]), int(os.environ["JAX_WORLD_SIZE"])
    local_rank = int(os.environ.get("JAX_LOCAL_RANK", rank))
    address = f"{os.environ.get('JAX_COORDINATOR_ADDR', '127.0.0.1')}:{os.environ.get('JAX_COORDINATOR_PORT', '1234')}"
    jax.distributed.initialize(
        coordinator_address=address, num_processes=world, process_id=rank,
        local_device_ids=local_rank if args.device == "cuda" else None,
        initialization_timeout=max(1, int(args.timeout)),
    )  # fmt: skip
    ctx = RankContext.from_environ(args.device, 0)
    identities = _gather_identities(identity(ctx))
    problems = identity_problems(identities)
    measured = []
    if not problems:
        summed = jax.pmap(lambda x: jax.lax.psum(x, "ranks"), axis_name="ranks")
        expected = float(world * (world + 1) // 2)
        for size in (s for s in JAX_SIZES_BYTES if s <= args.max_bytes):
            local = jnp.full((jax.local_device_count(), max(1, size // 4)), float(rank + 1), dtype=jnp.float32)
            times, exact = [], True
            for attempt in range(6):
                start = time.perf_counter()
                out = summed(local).block_until_ready()
                if attempt:  # the first call compiles
                    times.append(time.perf_counter() - start)
                exact = exact and bool(jnp.all(out == expected))
            median = statistics.median(times)
            busbw = ring_bytes(size, world) / median / 1e9
            measured.append({"bytes": size, "median_us": round(median * 1e6, 1),
                             "busbw_gbps": float(f"{busbw:.3g}"), "exact": exact})  # fmt: skip
    report = build_report(identities, measured, time.perf_counter() - started, problems)
    if rank == 0:
        write_report(args.run_dir, report)
    print(done_line(rank, report["ok"]), flush=True)
    jax.distributed.shutdown()
    return 0 if report["ok"] else PROBLEM_EXIT
