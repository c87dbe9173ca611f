"""Latency of one gloo all_reduce between CPU ranks on this machine (run by scripts/bench.py).

    python -m torch.distributed.run --nproc_per_node 2 scripts/bench_allreduce.py OUT.json

Back to back: every rank calls all_reduce in a loop, so the ranks arrive together and the time is
the transport's own (a message, a wake-up of the waiting thread, the reply), not waiting for a
slower peer. Rank 0 writes the median and the fastest call per tensor size.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

SIZES = (1, 2_500, 40_000)  # a scalar (KL, learning rate), a small MLP's gradients, a larger one
CALLS = 300


def main(out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    result: dict[str, dict[str, float]] = {}
    for size in SIZES:
        tensor = torch.zeros(size)
        for _ in range(30):
            dist.all_reduce(tensor)
        dist.barrier()
        times = []
        for _ in range(CALLS):
            started = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - started)
        result[str(size)] = {"median_s": statistics.median(times), "min_s": min(times)}
    if dist.get_rank() == 0:
        with open(out, "w", encoding="utf-8") as file:
            json.dump({"world_size": dist.get_world_size(), "floats": result}, file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
