"""A sweep on a real two-node Ray cluster: ``ray start --head`` in one network namespace,
``ray start --address`` in the other (docs/SWEEPS.md's recipe), ``islab-train sweep --ray-address``
on the head. Two one-core trials on two one-core nodes run at once, one on each node, and
sweep.json says where each ran.

``ray stop`` is never used: it stops every Ray process of the host, including other sweeps'. The
namespaces' processes are killed when the namespaces are deleted (tests/netns.py), and each node
has its own Ray temp directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from netns import Node, namespace_pids, two_nodes, unavailable_reason
from paths import SRC
from prerequisites import AS_ROOT_IN_CI, require

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.needs("ray")]

RAY = str(Path(sys.executable).parent / "ray")
GCS_PORT = 6379  # each namespace has its own ports


@pytest.fixture
def nodes() -> Iterator[tuple[Node, Node]]:
    require(unavailable_reason(), in_ci=AS_ROOT_IN_CI)  # CI runs as root: there it must run
    with two_nodes() as pair:
        yield pair


def node_env() -> dict[str, str]:
    src = str(SRC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    # Ray turns token authentication on by itself where ~/.ray/auth_token exists (an earlier local
    # Ray may have written it); the two nodes and the driver must agree: off, on a private network.
    env["RAY_AUTH_MODE"] = "disabled"
    return env


def ray_start(node: Node, *args: str) -> None:
    """``ray start`` in the node's namespace; again when Ray's fixed 30 s for a node to register
    ran out (a loaded machine), after killing what the failed attempt left in the namespace."""
    for attempt in range(3):
        temp_dir = tempfile.mkdtemp(prefix=f"islab-ray-{node.namespace}-")
        result = subprocess.run(
            node.command([RAY, "start", *args, "--node-ip-address", node.address, "--num-cpus", "1", "--num-gpus",
                          "0", "--temp-dir", temp_dir, "--disable-usage-stats"]),
            capture_output=True, text=True, env=node_env(), timeout=180,
        )  # fmt: skip
        if result.returncode == 0 or "timed out during startup" not in result.stderr or attempt == 2:
            break
        for pid in namespace_pids(node.namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(2)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_trials_run_on_both_nodes_of_a_ray_cluster(nodes, tmp_path):
    head, worker = nodes
    ray_start(head, "--head", "--port", str(GCS_PORT), "--include-dashboard", "false")
    ray_start(worker, "--address", f"{head.address}:{GCS_PORT}")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump({
            "run": {"lib": "rsl_rl", "device": "cpu", "nproc_per_node": 1, "num_envs": 16, "max_iterations": 4},
            "seeds": 2,
            "cpus_per_trial": 1,
        }),
        encoding="utf-8",
    )  # fmt: skip
    result = subprocess.run(
        head.command([sys.executable, "-m", "islab.cli", "sweep", str(sweep), "--ray-address",
                      f"{head.address}:{GCS_PORT}"]),
        capture_output=True, text=True, cwd=tmp_path, env=node_env(), timeout=480,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "logs" / "sweeps").glob("*/*")
    trials = json.loads((sweep_dir / "sweep.json").read_text())["trials"]
    assert [trial["status"] for trial in trials] == ["finished", "finished"]
    assert {trial["node"] for trial in trials} == {head.address, worker.address}
    first, second = trials
    assert max(first["start"], second["start"]) < min(first["end"], second["end"])  # at the same time
