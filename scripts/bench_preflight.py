"""What the pre-flight check costs and how fast it names a missing node (docs/NCCL.md, "Benchmark").

    python scripts/bench_preflight.py [--repeats 3] [--netns] [--timeout 15]

* **one node, 2 CPU ranks**: ``islab-train --device cpu --nproc 2 --preflight only`` -- the seconds
  the launch waits for the pre-flight (the number on its ``pre-flight:`` line: processes started,
  checked and stopped), the whole command's wall time and the CPU seconds it and every process
  below it used (user + system: the work, steadier than wall time on a shared machine), medians
  over ``--repeats``;
* **two nodes** (``--netns``, root): the same in two network namespaces (tests/netns.py's recipe),
  4 ranks, static rendezvous, gloo between the namespaces;
* **a missing node** (``--netns``): node 0 alone with ``--preflight-timeout T``: seconds until it
  names node 1 (the number on its ``pre-flight failed ... after X s`` line) and until it exits; the
  goal is T + 5 s.

Prints a Markdown table. Real processes, real torchrun and gloo; nothing is simulated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]
PASSED = re.compile(r"pre-flight: .*, ([\d.]+) s$", re.MULTILINE)
FAILED = re.compile(r"pre-flight failed on node \d+ after ([\d.]+) s")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ISLAB_", "SLURM_")) and "SOCKET_IFNAME" not in k}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _cpu_s() -> float:
    """CPU seconds (user + system) of every child and grandchild waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    started, cpu = time.monotonic(), _cpu_s()
    result = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=600)
    return time.monotonic() - started, _cpu_s() - cpu, result


def one_node(repeats: int, work: Path) -> tuple[list[float], list[float], list[float]]:
    checks, walls, cpus = [], [], []
    for index in range(repeats):
        argv = [*ISLAB_TRAIN, "--device", "cpu", "--nproc", "2", "--preflight", "only", "--log-dir",
                str(work / f"one{index}")]  # fmt: skip
        wall, cpu, result = _timed(argv, work)
        found = PASSED.search(result.stderr)
        if result.returncode != 0 or not found:
            raise SystemExit(f"one node: exit {result.returncode}\n{result.stderr[-2000:]}")
        checks.append(float(found.group(1)))
        walls.append(round(wall, 2))
        cpus.append(round(cpu, 2))
    return checks, walls, cpus


def _cluster(work: Path, address: str, interface: str, port: int = 29555) -> Path:
    spec = {"lib": "rsl_rl", "device": "cpu", "nnodes": 2, "nproc_per_node": 2,
            "rendezvous": {"master_addr": address, "master_port": port, "timeout_s": 120},
            "run_name": "bench", "env": {"GLOO_SOCKET_IFNAME": interface}}  # fmt: skip
    path = work / f"two-node-{port}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def two_nodes(repeats: int, work: Path, timeout_s: int) -> dict[str, list[float]]:
    sys.path.insert(0, str(REPO / "tests"))
    from netns import two_nodes as namespaces  # the tests' recipe: veth pair between two namespaces

    checks, walls, cpus, named, exits = [], [], [], [], []
    for index in range(repeats):
        with namespaces() as (node0, node1):
            spec = _cluster(work, node0.address, node0.interface)

            def argv(node_rank: int, *extra: str, index: int = index, spec: Path = spec) -> list[str]:
                return [*ISLAB_TRAIN, "--cluster", str(spec), "--node-rank", str(node_rank), "--log-dir",
                        str(work / f"two{index}-{node_rank}"), *extra]  # fmt: skip

            started, cpu = time.monotonic(), _cpu_s()
            processes = [
                subprocess.Popen(
                    node.command(argv(rank, "--preflight", "only")),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=_env(),
                    cwd=work,
                )
                for rank, node in ((0, node0), (1, node1))
            ]
            errs = [process.communicate(timeout=600)[1] for process in processes]
            walls.append(round(time.monotonic() - started, 2))
            cpus.append(round(_cpu_s() - cpu, 2))
            found = PASSED.search(errs[0])
            if any(process.returncode for process in processes) or not found:
                raise SystemExit(
                    f"two nodes: {[p.returncode for p in processes]}\n{errs[0][-2000:]}\n{errs[1][-2000:]}"
                )
            checks.append(float(found.group(1)))
            # another port: the one just used may still be in TIME_WAIT for the doctor's bind check
            alone = [
                *ISLAB_TRAIN,
                "--cluster",
                str(_cluster(work, node0.address, node0.interface, 29556)),
                "--node-rank",
                "0",
                "--log-dir",
                str(work / f"alone{index}"),
                "--preflight-timeout",
                str(timeout_s),
            ]
            wall, _, result = _timed(node0.command(alone), work)
            found = FAILED.search(result.stderr)
            if result.returncode != 1 or not found or "node 1" not in result.stderr:
                raise SystemExit(f"missing node: exit {result.returncode}\n{result.stderr[-2000:]}")
            named.append(float(found.group(1)))
            exits.append(round(wall, 2))
    return {"checks": checks, "walls": walls, "cpus": cpus, "named": named, "exits": exits}


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--netns", action="store_true", help="also the two-node figures (root, iproute2)")
    parser.add_argument("--timeout", type=int, default=15, help="--preflight-timeout of the missing-node run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="islab-bench-preflight-"))
    load = os.getloadavg()[0]
    checks, walls, cpus = one_node(args.repeats, work)
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at the start; medians of {args.repeats}\n")
    print("| job | pre-flight adds (s) | whole `--preflight only` command (s) | its CPU time (s) "
          "| time to name a missing node (s) |")  # fmt: skip
    print("|---|---|---|---|---|")
    print(f"| 1 node x 2 CPU ranks | {_median(checks)} | {_median(walls)} | {_median(cpus)} | - |")
    raw = {"one_node": {"checks": checks, "walls": walls, "cpus": cpus}}
    if args.netns:
        two = raw["two_nodes"] = two_nodes(args.repeats, work, args.timeout)
        print(f"| 2 nodes (netns) x 2 CPU ranks | {_median(two['checks'])} | {_median(two['walls'])} | "
              f"{_median(two['cpus'])} (both nodes) | {_median(two['named'])} named, {_median(two['exits'])} "
              f"to exit (timeout {args.timeout}) |")  # fmt: skip
    print(f"\nraw: {json.dumps(raw)}")


if __name__ == "__main__":
    main()
