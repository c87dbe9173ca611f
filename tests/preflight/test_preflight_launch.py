"""The pre-flight wired into the launcher: the probe plan is the job's own plan (pure), and real
2-rank CPU launches (torchrun + gloo) run it first -- healthy, off, only -- and ``doctor
--collectives --json`` prints the documented report. A wrong interface and the multi-node failures
need network namespaces: tests/preflight/test_preflight_netns.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from paths import DOCS

from islab.plan.nccl import flight_recorder_env, with_nccl_settings
from islab.plan.plan import build_plan
from islab.plan.preflight import KILL_AFTER_S, probe_file, probe_plan, wants_preflight
from islab.plan.torchrun import FORKED_RANKS, QUICK_EXIT_MODULE, with_c10d_node_facts
from islab.preflight.prediction import prediction_line
from islab.preflight.report import FIELDS_VARIABLE, PREDICTION_KEY, REPORT_KEYS
from islab.preflight.triage import NCCL_SAFE_ENV
from islab.preflight.verdict import Evidence, verdict
from islab.rundir import preflight_path, preflight_rank_log, summary_path
from islab.spec.run_spec import RunSpec

ISLAB_TRAIN = [sys.executable, "-m", "islab.cli"]
NOW = datetime(2026, 1, 1)


def _plan(**fields):
    spec = RunSpec(**fields)
    return spec, build_plan(spec, now=NOW, free_port=29555)


# -- the probe plan (pure) -------------------------------------------------------------------------


def test_the_probe_plan_is_the_jobs_plan_with_the_probe_as_program():
    spec, plan = _plan(device="cpu", nproc_per_node=2, nnodes=2, node_rank=1, max_restarts=3,
                       rendezvous={"master_addr": "10.0.0.1", "master_port": 29400})  # fmt: skip
    probe = probe_plan(plan, spec, 20)
    real, checked = plan.node(1).argv, probe.node(1).argv
    cut = real.index("islab.worker") - 1  # "-m islab.worker ..."
    # the launcher's options are the job's, except its rendezvous wait (torchrun's 900 s default
    # in the job: no --rdzv_conf there) and restarts
    assert "--rdzv_conf" not in real
    expected_head = [a for a in real[:cut]]
    expected_head[expected_head.index("--max_restarts") + 1] = "0"
    at = expected_head.index("--max_restarts")
    expected_head[at:at] = ["--rdzv_conf", "timeout=20"]
    # the same torchrun, ended without the interpreter's teardown (islab.preflight.quick_exit), its
    # ranks forked from its agent, running the probe's file
    assert expected_head[1:3] == ["-m", "torch.distributed.run"]
    expected_head[1:3] = ["-m", QUICK_EXIT_MODULE, "-m", "torch.distributed.run", *FORKED_RANKS]
    assert FORKED_RANKS == ("--run-path", "--start-method", "fork")
    cut_probe = cut + 7
    assert list(checked[:cut_probe]) == expected_head
    assert checked[cut_probe:] == (probe_file(), "--run-dir", plan.run_dir, "--device", "cpu", "--timeout", "20")
    assert Path(probe_file()).is_absolute() and probe_file().endswith("islab/preflight/probe.py")
    env = probe.node(1).env
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    fields = json.loads(env[FIELDS_VARIABLE])
    assert fields["task"] == spec.task and fields["seed"] == spec.seed and fields["nnodes"] == 2
    assert probe.rendezvous_timeout_s == 20 and probe.run_dir == plan.run_dir


def test_the_probe_bounds_a_rendezvous_wait_the_job_gives_or_leaves_to_torchrun():
    c10d = {"backend": "c10d", "endpoint": "10.0.0.1:29400", "id": "job"}
    cases = [
        ({"master_addr": "10.0.0.1", "master_port": 29400, "timeout_s": 1200}, "timeout=20"),
        (c10d, "join_timeout=20"),
        ({**c10d, "timeout_s": 700, "last_call_s": 5}, "join_timeout=20,last_call_timeout=5"),
    ]
    for rendezvous, expected in cases:
        spec, plan = _plan(device="cpu", nproc_per_node=2, nnodes=2, node_rank=0, rendezvous=rendezvous)
        plan = with_c10d_node_facts(plan, 0, hosts_store=True) if "endpoint" in rendezvous else plan
        argv = probe_plan(plan, spec, 20).node(0).argv
        conf = argv[argv.index("--rdzv_conf") + 1]
        assert conf.startswith(expected) and argv.count("--rdzv_conf") == 1, argv
        assert ("is_host=1" in conf) == ("endpoint" in rendezvous)
        if "endpoint" in rendezvous:
            assert argv[argv.index("--rdzv_id") + 1] == "job-preflight"


def test_the_probe_plan_of_skrl_jax_and_of_a_script():
    spec, plan = _plan(lib="skrl", ml_framework="jax", device="cpu", nproc_per_node=2)
    probe = probe_plan(plan, spec, 30)
    for rank in probe.node(0).ranks:
        assert rank.argv[1:3] == ("-m", "islab.preflight.probe")
        assert rank.env["JAX_RANK"] == str(rank.global_rank) and FIELDS_VARIABLE in rank.env
    assert probe.node(0).argv[probe.node(0).argv.index("--") + 1 :][:2] == ("-m", "islab.preflight.probe")
    spec, plan = _plan(device="cpu", nproc_per_node=2, entrypoint={"script": "train.py"}, args=("--epochs", "3"))
    argv = probe_plan(plan, spec, 30).node(0).argv
    assert "train.py" not in argv and argv[-7] == probe_file()


def test_only_jobs_of_several_ranks_are_checked_and_off_skips():
    assert wants_preflight(RunSpec(device="cpu", nproc_per_node=2), "on")
    assert not wants_preflight(RunSpec(device="cpu", nproc_per_node=2), "off")
    assert not wants_preflight(RunSpec(device="cpu", nproc_per_node=1), "on")
    elastic = RunSpec(device="cpu", nproc_per_node=2, nnodes="1:2", rendezvous={"backend": "c10d", "endpoint": "h:1"})
    assert not wants_preflight(elastic, "on")  # its nodes may arrive minutes apart
    spec, plan = _plan(device="cpu", nproc_per_node=2, nnodes=2, node_rank=0,
                       rendezvous={"backend": "c10d", "endpoint": "10.0.0.1:29400", "id": "job7"})  # fmt: skip
    argv = probe_plan(plan, spec, 9).node(0).argv
    assert argv[argv.index("--rdzv_id") + 1] == "job7-preflight"
    assert argv[argv.index("--rdzv_conf") + 1] == "join_timeout=9"


def test_nccl_safe_and_the_flight_recorder_leave_the_users_values():
    spec, plan = _plan(device="cuda", nproc_per_node=2, env={"NCCL_ALGO": "Tree"})
    safe = with_nccl_settings(plan, spec, safe=True, inherited={"NCCL_P2P_DISABLE": "0"})
    env = safe.node(0).env
    assert env["NCCL_ALGO"] == "Tree"  # the cluster file's
    assert "NCCL_P2P_DISABLE" not in env  # the shell's value reaches the ranks as it is
    assert env["NCCL_SHM_DISABLE"] == NCCL_SAFE_ENV["NCCL_SHM_DISABLE"]
    for name, value in flight_recorder_env(plan.run_dir).items():
        assert env[name] == value
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(plan.run_dir)
    # a user's script is not ours to change; CPU jobs have no NCCL
    spec, plan = _plan(device="cuda", nproc_per_node=2, entrypoint={"script": "t.py"})
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in with_nccl_settings(plan, spec, safe=False, inherited={}).node(0).env
    spec, plan = _plan(device="cpu", nproc_per_node=2)
    assert with_nccl_settings(plan, spec, safe=False, inherited={}) == plan


def test_torchs_flight_recorder_variables_exist_in_this_torch():
    """The names are torch's (2.13: ProcessGroupNCCL.hpp / the flight recorder's strings)."""
    import torch

    root = Path(torch.__file__).parent
    header = (root / "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp").read_text()
    assert '"TORCH_NCCL_DUMP_ON_TIMEOUT"' in header and '"TORCH_NCCL_TRACE_BUFFER_SIZE"' in header
    assert b"TORCH_NCCL_DEBUG_INFO_TEMP_FILE" in (root / "lib/libtorch_cpu.so").read_bytes()


def test_a_node_that_never_arrived_is_named_with_its_ranks_and_the_fix():
    evidence = Evidence(
        node_rank=0, nnodes=2, nproc_per_node=1, rank_logs={0: []}, timeout_s=10, rendezvous="10.0.0.1:29500",
        launcher_lines=["torch.distributed.DistStoreError: Timed out after 11 seconds waiting for clients. "
                        "1/2 clients joined."],
    )  # fmt: skip
    problems, lines = verdict(evidence)
    assert problems[0]["ranks"] == [1]
    assert "node 1 (rank 1) never arrived at 10.0.0.1:29500 within 10 s" in problems[0]["what"]
    assert "--node-rank 1" in problems[0]["fix"] and "firewall" in problems[0]["fix"]
    assert lines[0].startswith("  - node 1")


# -- real launches: 2 CPU ranks, torchrun + gloo ---------------------------------------------------


def _launch(tmp_path: Path, *extra: str, env: dict[str, str] | None = None, command: tuple[str, ...] = ()):
    argv = [*ISLAB_TRAIN, *command, "--device", "cpu", "--nproc", "2", "--num-envs", "16", "--log-dir",
            str(tmp_path / "logs"), *extra]  # fmt: skip
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ISLAB_") and not k.endswith("_SOCKET_IFNAME")}
    child_env.update(env or {})
    tmp_path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=child_env, cwd=tmp_path)


def _run_dir(tmp_path: Path) -> Path:
    (found,) = (tmp_path / "logs").glob("*/*/*")
    return found


@pytest.mark.slow
def test_a_healthy_launch_prints_the_preflight_line_then_trains(tmp_path):
    result = _launch(tmp_path, "--max-iterations", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pre-flight: 2 ranks on 1 node(s), all_reduce 4 B" in result.stderr
    run_dir = _run_dir(tmp_path)
    report = json.loads(preflight_path(run_dir).read_text())
    assert report["ok"] and report["world_size"] == 2 and list(report) == [*REPORT_KEYS, PREDICTION_KEY]
    # the sync prediction for this job (rsl_rl's 5 x 4 updates), from what the probe measured
    assert prediction_line(report[PREDICTION_KEY]) in result.stderr, result.stderr[-3000:]
    assert report[PREDICTION_KEY]["updates_per_iteration"] == 20 and report[PREDICTION_KEY]["sync_ms"] > 0
    assert "NCCL_DEBUG" not in result.stderr and preflight_rank_log(run_dir, 1).read_text().strip()
    assert summary_path(run_dir).is_file()  # and then it trained
    assert result.stderr.index("pre-flight:") < result.stderr.index("islab-train: starting")


@pytest.mark.slow
def test_preflight_off_skips_it_and_only_checks_without_training(tmp_path):
    off = _launch(tmp_path / "off", "--max-iterations", "1", "--preflight", "off")
    assert off.returncode == 0, off.stderr[-3000:]
    assert "pre-flight" not in off.stderr and not preflight_path(_run_dir(tmp_path / "off")).exists()
    only = _launch(tmp_path / "only", env={"ISLAB_PREFLIGHT": "only"})
    assert only.returncode == 0, only.stderr[-3000:]
    run_dir = _run_dir(tmp_path / "only")
    assert "pre-flight: 2 ranks" in only.stderr and preflight_path(run_dir).is_file()
    assert not summary_path(run_dir).exists() and "islab-train: starting" not in only.stderr


@pytest.mark.slow
@pytest.mark.parametrize("when", ["launch.yaml", "preflight/rank_1.log"], ids=["as-it-starts", "while-probing"])
def test_ctrl_c_during_the_preflight_leaves_no_half_run_directory(tmp_path, when):
    """Issue 30 item 5: Ctrl-C during the pre-flight used to leave a run directory holding only
    launch.yaml and an empty preflight/, which a later --resume or a listing took for a run. The
    launch stops (130) and removes the directory it had just made: Ctrl-C as the probe starts (once
    launch.yaml is written) and while its ranks run (their logs exist)."""
    import signal
    import time

    argv = [*ISLAB_TRAIN, "--device", "cpu", "--nproc", "2", "--num-envs", "16", "--log-dir", str(tmp_path / "logs")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ISLAB_") and not k.endswith("_SOCKET_IFNAME")}
    launch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=tmp_path, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not list((tmp_path / "logs").glob(f"*/*/*/{when}")):
        assert launch.poll() is None and time.monotonic() < deadline, launch.communicate()
        time.sleep(0.05)
    os.killpg(launch.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the foreground group
    _out, err = launch.communicate(timeout=120)
    assert launch.returncode == 130, err[-3000:]
    assert "islab-train: nothing was trained; removed the new run directory" in err, err[-3000:]
    assert list((tmp_path / "logs").glob("*/*/*")) == [] and "islab-train: starting" not in err


@pytest.mark.slow
def test_a_node_that_never_started_is_named_without_root(tmp_path):
    """Issue 30: without root (no network namespaces) a missing node was checked only by accident.
    Two torchrun nodes on localhost, a static rendezvous at 127.0.0.1, node 1 never started: node 0's
    pre-flight names it, with its rank and the fix, within the timeout, and trains nothing."""
    from ports import port_for_a_child

    port = port_for_a_child()
    result = _launch(tmp_path, "--nnodes", "2", "--nproc", "1", "--node-rank", "0", "--master-addr", "127.0.0.1",
                     "--master-port", str(port), "--max-iterations", "1", "--preflight-timeout", "5")  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "error: pre-flight failed on node 0" in result.stderr, result.stderr[-3000:]
    assert f"node 1 (rank 1) never arrived at 127.0.0.1:{port} within 5 s" in result.stderr
    assert "--node-rank 1 on that node" in result.stderr  # the fix
    assert "islab-train: starting" not in result.stderr and not summary_path(_run_dir(tmp_path)).exists()


@pytest.mark.slow
@pytest.mark.needs("jax")
def test_a_skrl_jax_job_is_checked_with_its_own_ranks(tmp_path):
    """skrl-JAX: islab-train starts the JAX ranks itself; the probe joins jax.distributed and sums."""
    result = _launch(tmp_path, "--lib", "skrl", "--ml-framework", "jax", "--preflight", "only")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pre-flight: 2 ranks on 1 node(s), all_reduce 4 B" in result.stderr
    assert preflight_rank_log(_run_dir(tmp_path), 1).is_file()


@pytest.mark.slow
def test_doctor_collectives_prints_the_documented_report(tmp_path):
    result = _launch(tmp_path, "--collectives", "--json", command=("doctor",))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert list(report) == [*REPORT_KEYS, PREDICTION_KEY] and report["ok"] is True
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert set(report["ranks"][0]) == {"rank", "host", "local_rank", "device", "gpu_uuid"}
    assert report["all_reduce"][0]["bytes"] == 4
    assert set(report["all_reduce"][0]) == {"bytes", "median_us", "busbw_gbps"}
    assert report["seconds"] < 60 + KILL_AFTER_S and report["problems"] == []


# -- during training: the same triage in the failure message -----------------------------------------


def test_a_training_failure_names_a_known_collective_failure_from_the_rank_logs(tmp_path):
    from islab.run.failures import known_failure_lines
    from islab.rundir import rank_log

    log = rank_log(tmp_path, 1)
    log.parent.mkdir(parents=True)
    log.write_text(
        "iteration 7\n[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
        "milliseconds before timing out.\n"
    )
    (found,) = known_failure_lines(str(tmp_path))
    assert "collective timeout" in found and "flight-recorder" in found
    assert known_failure_lines(str(tmp_path / "elsewhere")) == []


def test_docs_nccl_md_renders_every_known_failure_and_the_safe_settings():
    from islab.preflight.triage import KNOWN_FAILURES

    text = (DOCS / "NCCL.md").read_text(encoding="utf-8").replace("\\|", "|")
    for failure in KNOWN_FAILURES:
        assert f"| {failure.name} |" in text and failure.fix in text, failure.name
    for name, value in NCCL_SAFE_ENV.items():
        assert f"`{name}={value}`" in text
    for name in flight_recorder_env("RUN"):
        assert f"`{name}`" in text


def test_another_node_that_cannot_reach_node_0_says_whether_packets_are_dropped():
    base = {"node_rank": 1, "nnodes": 2, "nproc_per_node": 2, "rank_logs": {2: [], 3: []}, "timeout_s": 15,
            "rendezvous": "10.0.0.1:29500"}  # fmt: skip
    (dropped,), _ = verdict(Evidence(**base, rendezvous_reach="no answer within 1.5 s"))
    assert dropped["what"].startswith("master port: node 1 cannot reach node 0's rendezvous at 10.0.0.1:29500")
    assert "firewall" in dropped["what"] and "--dport 29500" in dropped["fix"] and dropped["ranks"] == [0, 1]
    (refused,), _ = verdict(Evidence(**base, rendezvous_reach="Connection refused"))
    assert "is not accepting connections" in refused["what"] and "--node-rank 0" in refused["fix"]
    (absent,), _ = verdict(Evidence(**base))
    assert "node 0 (ranks 0, 1) never arrived" in absent["what"]


def test_every_probe_process_is_stopped_at_the_hard_limit(tmp_path):
    """Whatever the launcher does, the pre-flight ends by its timeout + KILL_AFTER_S (a node's
    launcher stuck past its own rendezvous bound, say)."""
    from islab.plan.launch_plan import LaunchPlan, NodePlan
    from islab.run.preflight import run_preflight

    stuck = NodePlan(0, (sys.executable, "-c", "import time; time.sleep(60)"), {})
    plan = LaunchPlan(launcher="torchrun", run_dir=str(tmp_path), nodes=(stuck,))
    outcome = run_preflight(plan, 0, timeout_s=2)
    assert outcome.status == 1 and outcome.seconds <= 2 + KILL_AFTER_S, outcome
    assert "no rank of node 0 started within 2 s" in outcome.message
