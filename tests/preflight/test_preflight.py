"""Pre-flight: the known-failure table on real log lines, the probe's conclusions, and the probe
itself on real CPU ranks (torchrun + gloo; two "nodes" on this machine; skrl-JAX's variables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import port_for_a_child

from islab.preflight import report as pf_report
from islab.preflight.triage import KNOWN_FAILURES, NCCL_SAFE_ENV, lines_that_matter, triage

# Real lines, as NCCL, gloo and torch print them (sources in the comments: public issue threads).
REAL_LINES = {
    # torch 2.13's gloo with GLOO_SOCKET_IFNAME=nosuchif0 (run here)
    "gloo interface": "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "device.cc:84] ifa != nullptr. Unable to find address for: nosuchif0",
    # NVIDIA/nccl issue 210 / pytorch issue reports: "Last error: Bootstrap : no socket interface found"
    "NCCL interface": "Bootstrap : no socket interface found",
    # NVIDIA/nccl-tests issue 166
    "shared memory": "ubuntu:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory "
    "segment /dev/shm/nccl-KWfVyt (size 5967872)",
    # ray-project/ray_lightning issue 24
    "peer-to-peer": "z-pc:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 "
    "peer access is not supported between these two devices",
    # NVIDIA/TensorRT-LLM issue 448; Isaac Lab issue 4011's symptom
    "illegal memory access": "misc/strongstream.cc:343 NCCL WARN Cuda failure 'an illegal memory access was "
    "encountered'",
    # pytorch issue 68893
    "InfiniBand": "ip-172-31-0-137:14605:14673 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    # NVIDIA/nccl-tests issue 166
    "master port": "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to "
    "10.0.0.2<45763> failed : Software caused connection abort",
    # torch's ProcessGroupNCCL watchdog
    "collective timeout": "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600038 "
    "milliseconds before timing out.",
}


def test_every_known_failure_is_recognised_in_a_real_line():
    assert set(REAL_LINES) == {failure.name for failure in KNOWN_FAILURES}
    for name, line in REAL_LINES.items():
        (finding,) = triage(["some unrelated line", line])
        assert finding.name == name and finding.line == line.strip()
        assert finding.fix


def test_findings_name_what_the_line_names():
    (gloo,) = triage([REAL_LINES["gloo interface"]])
    assert "GLOO_SOCKET_IFNAME=nosuchif0" in gloo.what
    (port,) = triage([REAL_LINES["master port"]])
    assert "10.0.0.2<45763>" in port.what
    (illegal,) = triage([REAL_LINES["illegal memory access"]])
    assert "NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_ALGO=Ring" in illegal.fix


def test_healthy_nccl_info_lines_are_not_failures_but_are_shown():
    log = [
        "node1:12345:12345 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "node1:12345:12345 [0] NCCL INFO NET/IB : No device found.",
        "node1:12345:12345 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
        "node1:12345:12345 [0] NCCL INFO Using network Socket",
        "node1:12345:12345 [0] NCCL INFO comm 0x55 rank 0 nranks 2 cudaDev 0 busId 30 - Init START",
        "node1:12345:12345 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    ]
    assert [finding.name for finding in triage(log)] == ["InfiniBand"]
    shown = lines_that_matter(log)
    assert shown[-1].endswith("Failed to open libibverbs.so[.1]")  # warnings last, never cut
    assert any("Using network Socket" in line for line in shown) and not any("Init START" in line for line in shown)


def test_nccl_safe_is_isaac_labs_workaround_plus_p2p_off():
    assert NCCL_SAFE_ENV == {"NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_ALGO": "Ring",
                             "NCCL_P2P_DISABLE": "1"}  # fmt: skip


def _ident(rank: int, host: str = "n0", uuid: str | None = None, nccl: str | None = None, **fields) -> dict:
    return {"rank": rank, "host": host, "local_rank": rank, "device": f"cuda:{rank}", "gpu_uuid": uuid,
            "nccl": nccl, "fields": fields}  # fmt: skip


def test_two_ranks_on_one_gpu_are_refused_naming_both():
    (problem,) = pf_report.identity_problems(
        [_ident(0, uuid="GPU-a"), _ident(1, uuid="GPU-a"), _ident(2, uuid="GPU-b")]
    )
    assert problem["ranks"] == [0, 1] and "share one GPU (GPU-a on n0)" in problem["what"]
    assert pf_report.identity_problems([_ident(0, "n0", "GPU-a"), _ident(1, "n1", "GPU-a")]) == []  # other node


def test_nccl_versions_and_node_commands_must_agree_field_by_field():
    problems = pf_report.identity_problems([
        _ident(0, "n0", nccl="2.21.5", task="Islab-Cartpole-v0", num_envs=4096),
        _ident(1, "n0", nccl="2.21.5", task="Islab-Cartpole-v0", num_envs=4096),
        _ident(2, "n1", nccl="2.26.2", task="Islab-Cartpole-v0", num_envs=2048),
    ])  # fmt: skip
    assert [p["ranks"] for p in problems] == [[0, 1, 2], [2]]
    assert "NCCL 2.21.5 on ranks 0, 1; NCCL 2.26.2 on ranks 2" in problems[0]["what"]
    assert "num_envs is 2048 on n1 (rank 2) but 4096 on n0 (rank 0)" in problems[1]["what"]


def test_the_summary_line_and_the_json_shape():
    identities = [_ident(0, "n0"), {**_ident(1, "n1"), "local_rank": 0}]
    measured = [{"bytes": 4, "median_us": 31.2, "busbw_gbps": 0.0001, "exact": True},
                {"bytes": 67108864, "median_us": 3531.0, "busbw_gbps": 38.0, "exact": True}]  # fmt: skip
    built = pf_report.build_report(identities, measured, 2.42, [])
    assert set(built) == {"ok", "world_size", "nodes", "ranks", "all_reduce", "seconds", "problems"}
    assert set(built["ranks"][0]) == {"rank", "host", "local_rank", "device", "gpu_uuid"}
    assert (
        pf_report.summary_line(built) == "pre-flight: 2 ranks on 2 node(s), all_reduce 4 B 31 us, 64 MB 38 GB/s, 2.4 s"
    )
    # nodes are told apart by their first rank, not their host name (containers, network namespaces)
    same_host = [_ident(0, "vm"), {**_ident(1, "vm"), "local_rank": 0}]
    assert pf_report.build_report(same_host, measured, 1.0, [])["nodes"] == 2
    assert pf_report.build_report([_ident(0, "vm"), _ident(1, "vm")], measured, 1.0, [])["nodes"] == 1
    wrong = pf_report.build_report(identities, [{**measured[0], "exact": False}], 1.0, [])
    assert not wrong["ok"] and "wrong values" in wrong["problems"][0]["what"]


def _probe_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ISLAB_", "SLURM_"))}
    return {**env, "CUDA_VISIBLE_DEVICES": "", **extra}


@pytest.mark.slow
def test_the_probe_on_two_cpu_ranks_writes_a_healthy_report(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "islab.preflight.probe", "--run-dir", str(tmp_path), "--device", "cpu", "--timeout", "30"],
        capture_output=True, text=True, timeout=300, env=_probe_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    written = json.loads((tmp_path / "preflight.json").read_text())
    assert written["ok"] and written["world_size"] == 2 and written["nodes"] == 1 and written["problems"] == []
    assert [row["bytes"] for row in written["all_reduce"]] == list(pf_report_sizes())
    assert all(row["median_us"] > 0 for row in written["all_reduce"])


def pf_report_sizes():
    from islab.preflight.probe import SIZES_BYTES

    return SIZES_BYTES


@pytest.mark.slow
def test_two_nodes_started_with_different_commands_are_named_before_training(tmp_path: Path):
    """Two torchrun "nodes" on this machine, each with its own fields: every rank exits 3 and the
    report names the field, both values and the node."""
    port = port_for_a_child()
    nodes = []
    for node_rank, num_envs in ((0, 4096), (1, 2048)):
        fields = json.dumps({"task": "Islab-Cartpole-v0", "num_envs": num_envs})
        nodes.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
             "--node_rank", str(node_rank), "--master_addr", "127.0.0.1", "--master_port", str(port),
             "-m", "islab.preflight.probe", "--run-dir", str(tmp_path), "--device", "cpu", "--timeout", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=_probe_env(**{pf_report.FIELDS_VARIABLE: fields}),
        ))  # fmt: skip
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] != [0, 0], outputs
    written = json.loads((tmp_path / "preflight.json").read_text())
    (problem,) = written["problems"]
    assert problem["ranks"] == [1] and "num_envs is 2048" in problem["what"] and "but 4096" in problem["what"]
    assert written["all_reduce"] == []  # nothing is timed once the nodes disagree


@pytest.mark.slow
@pytest.mark.needs("jax")
def test_the_probe_of_a_skrl_jax_job_joins_jax_distributed_and_sums(tmp_path: Path):
    port = port_for_a_child()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "islab.preflight.probe", "--run-dir", str(tmp_path), "--device", "cpu",
             "--timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=_probe_env(JAX_PLATFORMS="cpu", JAX_RANK=str(rank), JAX_LOCAL_RANK=str(rank), JAX_WORLD_SIZE="2",
                           JAX_COORDINATOR_ADDR="127.0.0.1", JAX_COORDINATOR_PORT=str(port)),
        )
        for rank in (0, 1)
    ]  # fmt: skip
    outputs = [rank.communicate(timeout=300)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    written = json.loads((tmp_path / "preflight.json").read_text())
    assert (
        written["ok"] and written["world_size"] == 2 and [row["bytes"] for row in written["all_reduce"]] == [4, 4194304]
    )
