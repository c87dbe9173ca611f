"""The pre-flight across two real "nodes" (network namespaces joined by a veth pair, see tests/netns.py):
a healthy job passes it and trains; a node that never started is named within the pre-flight timeout
(+ 5 s), with its ranks and the fix; the master port dropped by a firewall rule in node 0's namespace
(iptables) is named as such on the node that cannot reach it.

Needs root, ``ip`` and ``iptables``; skipped without them, except under CI=true as root, where
.ci/run installs them and a missing one fails the tests (tests/prerequisites.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from netns import PORT, Node, cluster_file, run_dir_of, stderr_of, two_nodes, unavailable_reason, wait_all
from prerequisites import AS_ROOT_IN_CI, require

from islab.plan.preflight import KILL_AFTER_S

pytestmark = [pytest.mark.slow, pytest.mark.netns]

PREFLIGHT_TIMEOUT_S = 15
STARTUP_SLACK_S = 60  # islab-train's own start (imports, doctor checks) on a loaded 2-core machine


@pytest.fixture
def nodes() -> Iterator[tuple[Node, Node]]:
    require(unavailable_reason(), in_ci=AS_ROOT_IN_CI)
    with two_nodes() as pair:
        yield pair


def start(tmp_path, node: Node, node_rank: int, spec, *extra: str) -> subprocess.Popen[bytes]:
    import os
    import sys

    env = {name: value for name, value in os.environ.items() if not name.startswith(("ISLAB_", "SLURM_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    argv = [sys.executable, "-m", "islab.cli", "--cluster", str(spec), "--node-rank", str(node_rank),
            "--log-dir", str(tmp_path / f"node{node_rank}"), *extra]  # fmt: skip
    with open(tmp_path / f"node{node_rank}.err", "wb") as stderr:
        return subprocess.Popen(
            node.command(argv), stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=tmp_path, start_new_session=True
        )


def preflight_seconds(err: str) -> float:
    match = re.search(r"pre-flight failed on node \d+ after ([\d.]+) s", err)
    assert match, err[-3000:]
    return float(match.group(1))


def test_a_healthy_two_node_job_passes_the_preflight_and_trains(tmp_path, nodes):
    node0, node1 = nodes
    spec = cluster_file(tmp_path, node0, "static", max_iterations=2)
    processes = [start(tmp_path, node0, 0, spec), start(tmp_path, node1, 1, spec)]
    codes = wait_all(processes, 420)
    for node_rank, code in enumerate(codes):
        assert code == 0, f"node {node_rank}: {code}\n{stderr_of(tmp_path, node_rank)[-3000:]}"
    err = stderr_of(tmp_path, 0)
    assert "pre-flight: 4 ranks on 2 node(s), all_reduce 4 B" in err, err[-3000:]
    assert err.index("pre-flight:") < err.index("islab-train: starting")
    assert (run_dir_of(tmp_path / "node0") / "summary.json").is_file()
    assert (run_dir_of(tmp_path / "node1") / "preflight" / "rank_2.log").is_file()


def test_a_node_that_never_started_is_named_within_the_preflight_timeout(tmp_path, nodes):
    node0, _ = nodes
    spec = cluster_file(tmp_path, node0, "static", max_iterations=2)
    started = time.monotonic()
    process = start(tmp_path, node0, 0, spec, "--preflight-timeout", str(PREFLIGHT_TIMEOUT_S))
    (code,) = wait_all([process], PREFLIGHT_TIMEOUT_S + KILL_AFTER_S + STARTUP_SLACK_S)
    took = time.monotonic() - started
    err = stderr_of(tmp_path, 0)
    print(f"node 1 absent: node 0 exit {code} after {took:.1f} s (pre-flight {preflight_seconds(err):.1f} s)")
    assert code == 1, err[-3000:]
    assert preflight_seconds(err) <= PREFLIGHT_TIMEOUT_S + KILL_AFTER_S
    assert f"node 1 (ranks 2, 3) never arrived at {node0.address}:{PORT} within {PREFLIGHT_TIMEOUT_S} s" in err
    assert "--node-rank 1 on that node" in err  # the fix
    assert "islab-train: starting" not in err and not (run_dir_of(tmp_path / "node0") / "summary.json").exists()


def test_a_firewalled_master_port_is_named_as_such(tmp_path, nodes):
    require(None if shutil.which("iptables") else "iptables is not installed", in_ci=AS_ROOT_IN_CI)
    node0, node1 = nodes
    rule = ["INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP"]
    subprocess.run(node0.command(["iptables", "-A", *rule]), check=True, capture_output=True, timeout=30)
    spec = cluster_file(tmp_path, node0, "static", max_iterations=2)
    extra = ("--preflight-timeout", str(PREFLIGHT_TIMEOUT_S))
    processes = [start(tmp_path, node0, 0, spec, *extra), start(tmp_path, node1, 1, spec, *extra)]
    codes = wait_all(processes, PREFLIGHT_TIMEOUT_S + KILL_AFTER_S + STARTUP_SLACK_S)
    errs = [stderr_of(tmp_path, 0), stderr_of(tmp_path, 1)]
    assert codes == [1, 1], f"{codes}\n{errs[0][-2000:]}\n{errs[1][-2000:]}"
    # node 0 sees nobody arrive; node 1 cannot reach node 0's port: the firewall is named with the fix
    assert "node 1 (ranks 2, 3) never arrived" in errs[0]
    assert "master port" in errs[1] and f"{node0.address}" in errs[1] and "firewall" in errs[1], errs[1][-3000:]
    for err in errs:
        assert preflight_seconds(err) <= PREFLIGHT_TIMEOUT_S + KILL_AFTER_S


# -- one node: an interface that exists but carries no address (the doctor's name check passes it) -------

NO_ADDRESS = "noaddr0"


def _one_node_with_an_addressless_interface(node: Node) -> None:
    # a veth pair inside the namespace (no dummy module on every kernel), left down: no address at all
    # (an interface that is up gets an IPv6 link-local address, which gloo would use)
    for argv in (["ip", "link", "add", NO_ADDRESS, "type", "veth", "peer", "name", "noaddr1"],):
        subprocess.run(node.command(argv), check=True, capture_output=True, timeout=30)


def _single_node(tmp_path, node: Node, *extra: str) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    env = {name: value for name, value in os.environ.items() if not name.startswith(("ISLAB_", "SLURM_"))}
    env |= {"CUDA_VISIBLE_DEVICES": "", "GLOO_SOCKET_IFNAME": NO_ADDRESS}
    argv = [sys.executable, "-m", "islab.cli", "--device", "cpu", "--nproc", "2", "--num-envs", "16",
            "--max-iterations", "1", "--log-dir", str(tmp_path / "logs"), *extra]  # fmt: skip
    return subprocess.run(node.command(argv), capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)


def test_a_wrong_gloo_interface_is_named_by_the_preflight_and_nothing_trains(tmp_path, nodes):
    node0, _ = nodes
    _one_node_with_an_addressless_interface(node0)
    result = _single_node(tmp_path, node0, "--preflight-timeout", str(PREFLIGHT_TIMEOUT_S))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "error: pre-flight failed on node 0" in result.stderr
    assert f"GLOO_SOCKET_IFNAME={NO_ADDRESS} names no network interface" in result.stderr
    assert "ip -br addr" in result.stderr and "islab-train: starting" not in result.stderr
    (run_dir,) = (tmp_path / "logs").glob("*/*/*")
    assert not (run_dir / "summary.json").exists()
    report = json.loads((run_dir / "preflight.json").read_text())
    assert report["ok"] is False and any(NO_ADDRESS in problem["what"] for problem in report["problems"])


def test_with_preflight_off_a_training_failure_carries_the_same_triage(tmp_path, nodes):
    node0, _ = nodes
    _one_node_with_an_addressless_interface(node0)
    result = _single_node(tmp_path, node0, "--preflight", "off")
    assert result.returncode != 0
    (run_dir,) = (tmp_path / "logs").glob("*/*/*")
    assert "pre-flight" not in result.stderr and not (run_dir / "preflight.json").exists()
    assert f"likely cause (gloo interface): GLOO_SOCKET_IFNAME={NO_ADDRESS} names no network interface" in (
        result.stderr
    ), result.stderr[-3000:]
    assert result.stderr.rstrip().splitlines()[-1].startswith("error: ")


def test_nodes_started_with_different_options_are_named_field_by_field(tmp_path, nodes):
    """Shared fields may come from each node's command line while the pre-flight compares them."""
    node0, node1 = nodes
    spec = cluster_file(tmp_path, node0, "static", max_iterations=2)
    extra = ("--preflight-timeout", str(PREFLIGHT_TIMEOUT_S))
    processes = [start(tmp_path, node0, 0, spec, "--seed", "1", *extra),
                 start(tmp_path, node1, 1, spec, "--seed", "2", *extra)]  # fmt: skip
    codes = wait_all(processes, PREFLIGHT_TIMEOUT_S + KILL_AFTER_S + STARTUP_SLACK_S)
    err = stderr_of(tmp_path, 0)
    assert codes == [1, 1], f"{codes}\n{err[-3000:]}"
    assert re.search(r"seed is 2 on \S+ \(rank 2\) but 1 on \S+ \(rank 0\)", err), err[-3000:]
    assert "islab-train: starting" not in err
