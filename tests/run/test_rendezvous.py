"""Rendezvous: a node that never arrives is a clear error after ``rendezvous.timeout_s``, not a hang.

One machine plays node 0 of a two-node job whose node 1 is never started. torchrun's static
rendezvous (node 0's TCPStore waits for the other agents: ``--rdzv_conf timeout=T``), its c10d
rendezvous (``--rdzv_conf join_timeout=T``) and skrl-JAX (``jax.distributed.initialize``, bounded
by the supervisor) must each end non-zero within the timeout plus a few seconds, with the message
that names the address and the fix. A busy port on node 0 is refused before anything starts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_env import child_env
from netns import run_dir_of
from ports import port_for_a_child

from islab import cli
from islab.run import failures, skrl_jax_node, torchrun_node

TIMEOUT_S = 5
# Start-up of torchrun / the JAX ranks and shutdown on top of the timeout: measured 3.8 s (static
# and c10d, from launch: 8.8 s in all) and 0.2 s (skrl-JAX, from the rank starting to wait) on the
# 2-core machine. The bound is generous, for a loaded CI machine: what the tests catch is a
# timeout that is not honoured, i.e. torchrun's or JAX's own defaults (300 s and more).
SLACK_S = 60.0


def clean_env() -> dict[str, str]:
    env = child_env(("ISLAB_", "SLURM_"))
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_node0(tmp_path: Path, *options: str, timeout_s: float = 120) -> tuple[int, str, float]:
    argv = [
        sys.executable, "-m", "islab.cli", "--device", "cpu", "--nproc", "1", "--num-envs", "64",
        "--max-iterations", "3", "--log-dir", str(tmp_path / "logs"), "--nnodes", "2",
        "--rdzv-timeout", str(TIMEOUT_S), *options,
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        argv, capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=timeout_s, check=False
    )
    return result.returncode, result.stderr, time.monotonic() - started


def expected_message(address: str) -> str:
    return (
        f"error: rendezvous: node(s) did not join within {TIMEOUT_S} s at {address}; check that every node "
        f"runs islab-train with the same spec and can reach {address} (islab-train doctor)"
    )


# ----------------------------------------------------------------------------------------------
# Pure parts
# ----------------------------------------------------------------------------------------------


def test_rendezvous_timeout_is_recognised_only_in_torchruns_own_lines():
    static = ["torch.distributed.DistStoreError: Timed out after 6 seconds waiting for clients. 1/2 clients joined."]
    c10d = ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"]
    node1 = ["torch.distributed.DistNetworkError: The client socket has timed out after 5000ms while trying to connect"]
    assert torchrun_node.rendezvous_timed_out(static)
    assert torchrun_node.rendezvous_timed_out(c10d)
    assert torchrun_node.rendezvous_timed_out(node1)
    # the same words from a rank (a training failure, prefixed by torchrun --tee) do not count
    assert not torchrun_node.rendezvous_timed_out([f"[default1]:{static[0]}"])
    assert not torchrun_node.rendezvous_timed_out(["RuntimeError: boom"])


def test_rendezvous_message_names_timeout_and_address():
    assert failures.rendezvous_message("10.77.0.1:29500", 7) == (
        "error: rendezvous: node(s) did not join within 7 s at 10.77.0.1:29500; check that every node runs "
        "islab-train with the same spec and can reach 10.77.0.1:29500 (islab-train doctor)"
    )


def test_jax_watch_times_out_only_ranks_that_wait_and_never_join():
    now = [100.0]
    watch = skrl_jax_node.JaxRendezvousWatch(clock=lambda: now[0])
    watch.observe(0, "\x1b[38;20m[skrl:INFO] Distributed (rank: 0, local rank: 0, world size: 4)\x1b[0m\n")
    watch.observe(1, "[skrl:INFO] Distributed (rank: 1, local rank: 1, world size: 4)\n")
    now[0] = 103.0
    watch.observe(1, "[skrl:INFO] Using device local to process with index/rank 1 (cpu:1)\n")
    assert watch.timed_out(5) is None
    assert watch.waiting(0) and not watch.waiting(1)
    now[0] = 105.5
    assert watch.timed_out(5) == 0
    watch.observe(0, "[skrl:WARNING] Failed to get the device local to process with index/rank 0: x\n")
    assert watch.timed_out(5) is None


# ----------------------------------------------------------------------------------------------
# A port already taken on node 0 stops the launch before anything starts
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def islab(capsys, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("ISLAB_", "SLURM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    def invoke(*args: str) -> tuple[int, str, str]:
        code = cli.run(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.mark.parametrize(
    "options",
    [
        ("--master-addr", "127.0.0.1", "--master-port", "{port}"),
        ("--lib", "skrl", "--ml-framework", "jax", "--coordinator-address", "127.0.0.1:{port}"),
    ],
    ids=["static-master", "jax-coordinator"],
)
def test_busy_port_on_node0_of_a_two_node_job_is_refused_before_launch(islab, tmp_path, options):
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = [part.format(port=port) for part in options]
        code, _, err = islab(
            "--device", "cpu", "--nnodes", "2", "--node-rank", "0", *args, "--log-dir", str(tmp_path / "L")
        )  # fmt: skip
    assert code == 2, err
    assert f"port {port} is already in use" in err
    assert "nothing was started" in err
    assert not (tmp_path / "L").exists()


# ----------------------------------------------------------------------------------------------
# Only node 0 of two: a clear error after the timeout
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_static_rendezvous_missing_node_fails_after_the_timeout(tmp_path):
    port = port_for_a_child()
    code, err, took = run_node0(tmp_path, "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", str(port))
    print(f"static: exit {code} after {took:.1f} s (timeout {TIMEOUT_S} s)")
    assert code != 0
    assert TIMEOUT_S <= took < TIMEOUT_S + SLACK_S, f"ended after {took:.1f} s (timeout {TIMEOUT_S} s)"
    assert err.rstrip().splitlines()[-1] == expected_message(f"127.0.0.1:{port}"), err[-2000:]


@pytest.mark.slow
def test_c10d_rendezvous_missing_node_fails_after_the_timeout(tmp_path):
    port = port_for_a_child()
    endpoint = f"127.0.0.1:{port}"
    code, err, took = run_node0(tmp_path, "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "t")
    print(f"c10d: exit {code} after {took:.1f} s (timeout {TIMEOUT_S} s)")
    assert code != 0
    assert TIMEOUT_S <= took < TIMEOUT_S + SLACK_S, f"ended after {took:.1f} s (timeout {TIMEOUT_S} s)"
    assert err.rstrip().splitlines()[-1] == expected_message(endpoint), err[-2000:]


@pytest.mark.slow
def test_jax_missing_node_fails_after_the_timeout(tmp_path):
    """skrl calls jax.distributed.initialize at import without a timeout argument (JAX waits
    300 s); the supervisor counts from the rank's "Distributed (rank: ..." line."""
    port = port_for_a_child()
    address = f"127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "islab.cli", "--lib", "skrl", "--ml-framework", "jax", "--device", "cpu",
        "--nproc", "1", "--num-envs", "64", "--max-iterations", "3", "--log-dir", str(tmp_path / "logs"),
        "--nnodes", "2", "--node-rank", "0", "--coordinator-address", address, "--rdzv-timeout", str(TIMEOUT_S),
    ]  # fmt: skip
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=clean_env(), cwd=tmp_path)
    try:
        joining_at = None
        deadline = time.monotonic() + 180
        while process.poll() is None and time.monotonic() < deadline:
            run_dir = run_dir_of(tmp_path / "logs")
            log = run_dir / "logs" / "rank_0.log" if run_dir else None
            if joining_at is None and log and log.exists() and "Distributed (rank:" in log.read_text(errors="replace"):
                joining_at = time.monotonic()
            time.sleep(0.05)
        assert process.poll() is not None, "islab-train did not end"
        took = time.monotonic() - joining_at if joining_at else float("nan")
        print(f"jax: exit {process.returncode} {took:.1f} s after rank 0 started waiting (timeout {TIMEOUT_S} s)")
        err = stderr_path.read_text()
        assert process.returncode != 0
        assert joining_at is not None, err[-2000:]
        assert TIMEOUT_S <= took < TIMEOUT_S + SLACK_S, f"ended after {took:.1f} s (timeout {TIMEOUT_S} s)"
        assert err.rstrip().splitlines()[-1] == expected_message(address), err[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
