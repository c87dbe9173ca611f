"""The pre-flight probe: what every rank runs instead of training, for a few seconds, first.

A distributed job fails in three places before the first gradient: the ranks cannot find each
other (rendezvous, interfaces, firewalls), two ranks sit on one GPU (placement), or the collective
path itself is broken (NCCL transports, shared memory, drivers). The training finds out late --
after Isaac Sim has booted, at the first broadcast, as a hang. This probe is started with the
job's own plan (same launcher, rendezvous, environment, devices and world size) and, on every
rank:

1. joins the process group with the job's real backend (NCCL on GPUs, gloo on CPU; skrl-JAX:
   ``jax.distributed`` and a ``psum``), within the pre-flight timeout;
2. all-gathers each rank's identity (host, local rank, device, GPU UUID, CUDA_VISIBLE_DEVICES,
   NCCL version) and the fields every node must agree on (the launcher passes them in
   ``ISLAB_PREFLIGHT_FIELDS``), then refuses two ranks on one GPU, mismatched NCCL versions and
   nodes that were started with different commands -- named field by field;
3. all-reduces 4 B to 64 MB (median latency; bus bandwidth as nccl-tests defines it,
   ``size / time x 2 (n - 1) / n``), checking the sums are exact; broadcasts; a barrier;
4. rank 0 writes ``preflight.json`` (:mod:`islab.preflight.report` builds it).

Exit status: 0 healthy, 3 a problem found (every rank exits alike, so the launcher needs no
guessing); an exception (a rank that never arrived, a broken transport) is the launcher's to name.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from islab.preflight.identity import identity
from islab.preflight.quick_exit import end
from islab.preflight.report import PROBLEM_EXIT, build_report, done_line, identity_problems, write_report
from islab.spec.sync_cost import ring_bytes

SIZES_BYTES = (4, 4096, 262_144, 4_194_304, 67_108_864)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m islab.preflight.probe", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="preflight.json is written here (rank 0)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to join and for each collective")
    parser.add_argument("--max-bytes", type=int, default=SIZES_BYTES[-1], help="largest all-reduce")
    return parser.parse_args(argv)


def repeats_of(size_bytes: int, device: str) -> tuple[int, int]:
    """(warm-up calls, timed calls) of one size. The first size's warm-up pays the connection
    set-up; on CPU (gloo, ~0.3 GB/s here) one 64 MB all-reduce takes 0.2-0.8 s, so the sizes above
    4 MB get 2 timed calls and no warm-up there (the smaller sizes already warmed the pairs up);
    every call's sum is still checked. NCCL moves 64 MB in milliseconds: 1 + 3."""
    if size_bytes <= 262_144:
        return 1, 20
    if size_bytes <= 4_194_304:
        return 1, 5
    return (0, 2) if device == "cpu" else (1, 3)


def timed_all_reduce(size_bytes: int, ctx: Any) -> dict[str, Any]:
    """Median of several all-reduces of ``size_bytes`` (float32), after the warm-up of
    :func:`repeats_of`; the sum of ``rank + 1`` over all ranks must come back exactly (small
    integers are exact in float32)."""
    import torch
    import torch.distributed as dist

    count = max(1, size_bytes // 4)
    expected = float(ctx.world_size * (ctx.world_size + 1) // 2)
    warmups, repeats = repeats_of(size_bytes, ctx.device)
    times = []
    exact = True
    for attempt in range(warmups + repeats):
        tensor = torch.full((count,), float(ctx.rank + 1), device=ctx.device)
        if ctx.device != "cpu":
            torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if ctx.device != "cpu":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        exact = exact and bool(torch.all(tensor == expected))
        if attempt >= warmups:  # a warm-up pays for connection set-up
            times.append(elapsed)
    median = statistics.median(times)
    busbw = ring_bytes(size_bytes, ctx.world_size) / median / 1e9 if median > 0 else None
    return {"bytes": size_bytes, "median_us": round(median * 1e6, 1), "busbw_gbps": busbw and float(f"{busbw:.3g}"),
            "exact": exact}  # fmt: skip


def torch_probe(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from islab.worker.context import RankContext, configure_process

    started = time.perf_counter()
    ctx = RankContext.from_environ(args.device, 0)
    configure_process(ctx)
    dist.init_process_group(
        backend=ctx.backend, rank=ctx.rank, world_size=ctx.world_size, timeout=timedelta(seconds=args.timeout),
        device_id=torch.device(ctx.device) if ctx.backend == "nccl" else None,
    )  # fmt: skip
    identities: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(identities, identity(ctx))
    problems = identity_problems(identities)
    measured = []
    if not problems:
        measured = [timed_all_reduce(size, ctx) for size in SIZES_BYTES if size <= args.max_bytes]
        probe = torch.arange(8, dtype=torch.float32, device=ctx.device) * (1 if ctx.rank == 0 else 0)
        dist.broadcast(probe, src=0)
        if not bool(torch.all(probe == torch.arange(8, dtype=torch.float32, device=ctx.device))):
            measured.append({"broadcast_exact": False})
        dist.barrier()
    report = build_report(identities, measured, time.perf_counter() - started, problems)
    if ctx.rank == 0:
        write_report(args.run_dir, report)
    print(done_line(ctx.rank, report["ok"]), flush=True)
    dist.destroy_process_group()
    return 0 if report["ok"] else PROBLEM_EXIT


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "JAX_RANK" in os.environ:
        from islab.preflight.jax_probe import jax_probe

        return jax_probe(args)
    return torch_probe(args)


if __name__ == "__main__":
    status = main()
    if multiprocessing.parent_process() is not None:
        # forked by torchrun (--run-path --start-method fork): its agent waits for this function's
        # return (SystemExit(0) counts as one); the fork ends without teardown on its own
        sys.exit(status)
    end(status)  # no interpreter teardown of torch: the launcher waits for this process to go
