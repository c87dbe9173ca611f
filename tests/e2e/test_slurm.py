"""SLURM mode: node lists, the allocation layer and its precedence, batch scripts, a real cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_env import child_env
from netns import pid_alive
from paths import FIXTURES
from ports import port_for_a_child
from prerequisites import AS_ROOT_IN_CI, require

from islab import rundir
from islab.resolve import slurm
from islab.resolve.resolve import Source, resolve_spec
from islab.spec.issues import SpecError

# One SLURM cluster on the machine at a time: under pytest-xdist these tests share one worker.
pytestmark = [pytest.mark.usefixtures("clean_environment"), pytest.mark.xdist_group("slurm")]


def srun_environ(**extra: str) -> dict[str, str]:
    """What srun sets for the task on the second node of a 3-node job (values as seen on a cluster)."""
    return {
        "SLURM_JOB_ID": "123456",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_NNODES": "3",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_NODEID": "1",
        "SLURM_JOB_NODELIST": "gpu[01-02],cpu7",
        "SLURM_STEP_NODELIST": "gpu[01-02],cpu7",
        "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
        **extra,
    }


# ----------------------------------------------------------------------------------------------
# Pure parts
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("a1,b[2-3]", ["a1", "b2", "b3"]),
        ("node-7", ["node-7"]),
        ("rack[1-2]-n[08-09]", ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]),
        ("c[9-11]", ["c9", "c10", "c11"]),
    ],
)
def test_expand_nodelist_real_world_forms(nodelist, hosts):
    assert slurm.expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["", "gpu[01-", "gpu[3-1]"])
def test_expand_nodelist_rejects_garbage(bad):
    with pytest.raises(ValueError):
        slurm.expand_nodelist(bad)


def test_tasks_per_node_and_port():
    assert slurm.tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert slurm.tasks_per_node("1") == [1]
    assert slurm.job_port(123456) == 20000 + 123456 % 20000
    assert slurm.job_port(5) != slurm.job_port(6)
    assert 20000 <= slurm.job_port(10**9) < 40000


def test_allocation_from_srun_environment():
    allocation = slurm.allocation_from_environ(srun_environ())
    assert (allocation.nnodes, allocation.node_rank, allocation.master_host) == (3, 1, "gpu01")
    assert allocation.hosts == ("gpu01", "gpu02", "cpu7")
    assert allocation.port == 20000 + 123456 % 20000
    assert slurm.in_srun_step(srun_environ())
    batch_script = {k: v for k, v in srun_environ().items() if k != "SLURM_STEP_ID"}
    assert not slurm.in_srun_step(batch_script)  # sbatch's own script has SLURM_PROCID=0 but is no step


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"SLURM_JOB_ID": None}, "not running inside a SLURM allocation"),
        ({"SLURM_NODEID": None}, "SLURM_NODEID"),
        ({"SLURM_STEP_NUM_NODES": "two"}, "not a whole number"),
        ({"SLURM_STEP_NODELIST": "gpu[01-"}, "host list"),
        ({"SLURM_STEP_NUM_NODES": "2"}, "names 3 host(s)"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)"}, "--ntasks-per-node=1"),
    ],
)
def test_allocation_errors_are_one_line_with_a_fix(change, fragment):
    environ = srun_environ()
    for name, value in change.items():
        if value is None:
            environ.pop(name)
        else:
            environ[name] = value
    with pytest.raises(SpecError) as caught:
        slurm.allocation_from_environ(environ)
    (issue,) = caught.value.issues
    assert fragment in issue.message()


def test_allocation_layer_follows_the_launcher():
    allocation = slurm.allocation_from_environ(srun_environ())
    port = allocation.port
    static = allocation.layer({})
    assert static["rendezvous.master_addr"].value == "gpu01"
    assert static["rendezvous.master_port"].value == port
    assert static["node_rank"].origin == "SLURM_NODEID"
    c10d = allocation.layer({"rendezvous.backend": "c10d"})
    assert c10d["rendezvous.endpoint"].value == f"gpu01:{port}"
    assert c10d["rendezvous.id"].value == "slurm-123456"
    assert "rendezvous.id" not in allocation.layer({"rendezvous.backend": "c10d", "rendezvous.id": "mine"})
    jax = allocation.layer({"ml_framework": "jax"})
    assert jax["coordinator_address"].value == f"gpu01:{port}"
    assert "rendezvous.master_addr" not in jax


def test_precedence_cli_over_slurm_over_env_and_file(tmp_path):
    from islab.resolve.resolve import Provided

    cluster = tmp_path / "c.yaml"
    cluster.write_text("nnodes: 8\ndevice: cpu\nrendezvous: {master_addr: 10.0.0.1, master_port: 5555}\n")
    allocation = slurm.allocation_from_environ(srun_environ())
    resolved = resolve_spec(
        {"rendezvous.master_port": Provided(6000, "--master-port")},
        {"nnodes": Provided(4, "ISLAB_NNODES")},
        cluster,
        slurm=allocation.layer,
    )
    spec = resolved.spec
    assert spec.nnodes == 3 and resolved.sources["nnodes"] is Source.SLURM
    assert spec.rendezvous.master_addr == "gpu01"
    assert spec.rendezvous.master_port == 6000 and resolved.sources["rendezvous.master_port"] is Source.CLI
    assert spec.node_rank == 1


# ----------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------


def test_under_srun_the_plan_comes_from_the_allocation(islab, monkeypatch):
    for name, value in srun_environ().items():
        monkeypatch.setenv(name, value)
    code, out, err = islab("--device", "cpu", "--dry-run", "--json")
    assert code == 0, err
    (node,) = json.loads(out)["nodes"]
    argv = node["argv"]
    assert node["node_rank"] == 1
    assert argv[argv.index("--nnodes") + 1] == "3"
    assert argv[argv.index("--master_addr") + 1] == "gpu01"
    assert argv[argv.index("--master_port") + 1] == str(20000 + 123456 % 20000)
    # the command line still wins, and --no-slurm turns it off
    code, out, _ = islab("--device", "cpu", "--master-port", "7000", "--dry-run", "--json")
    argv = json.loads(out)["nodes"][0]["argv"]
    assert argv[argv.index("--master_port") + 1] == "7000"
    code, out, _ = islab("--device", "cpu", "--no-slurm", "--dry-run", "--json")
    argv = json.loads(out)["nodes"][0]["argv"]
    assert argv[argv.index("--nnodes") + 1] == "1"
    code, out, _ = islab("--device", "cpu", "--dry-run")
    assert "(source: slurm, SLURM_NODEID)" in out


def test_slurm_flag_outside_an_allocation_is_a_clear_error(islab):
    code, _, err = islab("--slurm", "--device", "cpu", "--dry-run")
    assert code == 2
    assert err.startswith("error: --slurm: SLURM_JOB_ID is not set") and "islab-train sbatch" in err


def test_sbatch_script_is_quoted_and_complete(islab, tmp_path):
    hostile = tmp_path / "my logs" / "$(touch pwned)"
    code, script, err = islab(
        "sbatch", "--gpus", "4", "--nnodes", "2", "--partition", "gpu", "--time", "01:00:00", "--log-dir",
        str(hostile), "--job-name", "cart pole", "--num-envs", "128", "algorithm.learning_rate=1e-3",
    )  # fmt: skip
    assert code == 0, err
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    header = [line for line in lines if line.startswith("#SBATCH")]
    assert "#SBATCH --nodes=2" in header and "#SBATCH --ntasks-per-node=1" in header
    assert "#SBATCH --gres=gpu:4" in header and "#SBATCH --cpus-per-task=16" in header
    assert "#SBATCH --partition=gpu" in header and "#SBATCH --time=01:00:00" in header
    assert "#SBATCH --job-name='cart pole'" in header
    output = next(line for line in header if line.startswith("#SBATCH --output="))
    assert shlex.split(output.split("=", 1)[1]) == [str(hostile / "slurm-%x-%j.out")]
    assert hostile.is_dir()  # SLURM cannot create it
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid shell
    command = shlex.split(script[script.index("exec srun") :].replace("\\\n", " "))
    assert command[:2] == ["exec", "srun"] and "--ntasks-per-node=1" in command
    node = command[command.index(sys.executable) :]
    assert node[:4] == [sys.executable, "-m", "islab.cli", "--slurm"]
    assert node[node.index("--gpus") + 1] == "4"
    assert node[node.index("--log-dir") + 1] == str(hostile)
    assert node[-1] == "algorithm.learning_rate=1e-3"
    assert "--nnodes" not in node  # SLURM says how many nodes there are
    assert not Path("pwned").exists()


def test_sbatch_and_doctor_take_an_entry_points_arguments_after_the_double_dash(islab, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, job, err = islab("sbatch", "--device", "cpu", "--nproc", "2", "--script", str(script), "--", "--steps", "3",
                           "a b; touch pwned")  # fmt: skip
    assert code == 0, err
    command = shlex.split(job[job.index("exec srun") :].replace("\\\n", " "))
    node = command[command.index("--slurm") :]
    assert node[node.index("--script") + 1] == str(script)
    assert node[node.index("--") :] == ["--", "--steps", "3", "a b; touch pwned"]  # verbatim, after our options
    code, _, err = islab("doctor", "--device", "cpu", "--nproc", "2", "--script", str(script), "--", "--steps", "3")
    assert code == 0, err


def test_sbatch_validates_the_spec_first(islab):
    code, out, err = islab("sbatch", "--lib", "rl_games", "--ml-framework", "jax")
    assert code == 2 and out == "" and "jax only works with skrl" in err


# ----------------------------------------------------------------------------------------------
# A real single-node SLURM cluster (slurm-wlm + munge), configured and started by the test
# ----------------------------------------------------------------------------------------------

SLURM_BINARIES = ("sbatch", "squeue", "scancel", "slurmctld", "slurmd", "munged")


def _stop_by_pid_files(pid_files: list[Path], grace_s: float = 5.0) -> None:
    """SIGTERM to every daemon at once (each takes seconds to save its state), SIGKILL to any still
    alive after ``grace_s``."""
    pids = []
    for pid_file in pid_files:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if pid_alive(pid)]
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def slurm_cluster(tmp_path):
    """A private one-node cluster: own munge socket and key, own ports, state and pid files in
    tmp_path; clients find it through SLURM_CONF. Daemons are stopped by pid file, always. Its first
    job id is a free port (FirstJobId): islab-train's rendezvous port under SLURM is 20000 + job id %
    20000, so with every cluster's jobs numbered from 1, each test's job 1 listened on port 20001, and
    a job started while the previous test's job still held it died with EADDRINUSE."""
    missing = [name for name in SLURM_BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:  # CI (as root) installs SLURM: there a missing one fails instead of skipping
        require(f"SLURM is not installed ({', '.join(missing)} missing): apt-get install -y slurm-wlm munge",
                in_ci=AS_ROOT_IN_CI)  # fmt: skip
    if os.geteuid() != 0:
        pytest.skip("starting slurmd/munged needs root")
    base = tmp_path / "slurm"
    base.mkdir(mode=0o700)
    (base / "state").mkdir()
    (base / "spool").mkdir()
    key = base / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    memory_mb = max(512, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2**20 * 0.8))
    conf = base / "slurm.conf"
    conf.write_text(
        f"""ClusterName=islabtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={base}/munge.sock
CredType=cred/munge
SlurmctldPort={port_for_a_child()}
SlurmdPort={port_for_a_child()}
FirstJobId={port_for_a_child()}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd.log
NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES State=UP MaxTime=INFINITE
"""
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    sbin = Path("/usr/sbin")
    try:
        subprocess.run(
            [str(sbin / "munged"), "--force", f"--key-file={key}", f"--socket={base}/munge.sock",
             f"--pid-file={base}/munged.pid", f"--log-file={base}/munged.log", f"--seed-file={base}/munge.seed"],
            check=True, timeout=30,
        )  # fmt: skip
        subprocess.run([str(sbin / "slurmctld"), "-c", "-f", str(conf)], check=True, env=env, timeout=30)
        subprocess.run([str(sbin / "slurmd"), "-f", str(conf)], check=True, env=env, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout
            if state.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the SLURM node did not become idle: {(base / 'slurmctld.log').read_text()[-2000:]}")
        yield env, base
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True, timeout=30)
        for _ in range(50):
            queue = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=env, timeout=30)
            if queue.returncode != 0 or not queue.stdout.strip():
                break
            time.sleep(0.2)
        _stop_by_pid_files([base / f"{name}.pid" for name in ("slurmd", "slurmctld", "munged")])


@pytest.mark.slow
def test_sbatch_script_trains_on_a_real_slurm_cluster(slurm_cluster, tmp_path):
    env, _ = slurm_cluster
    env = child_env("ISLAB_", base=env)
    log_dir = tmp_path / "runs"
    job_id = _submit_and_wait(
        env, tmp_path, "--device", "cpu", "--nproc", "2", "--num-envs", "64", "--max-iterations", "3",
        "--log-dir", str(log_dir),
    )  # fmt: skip
    output = (log_dir / f"slurm-islab-rsl_rl-{job_id}.out").read_text()
    (summary_path,) = log_dir.glob("rsl_rl/Islab-Cartpole-v0/*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["iterations"] == 3 and summary["world_size"] == 2, output[-3000:]
    digests = {json.loads(path.read_text())["policy_sha256"] for path in summary_path.parent.glob("digests/*.json")}
    assert len(list(summary_path.parent.glob("digests/*.json"))) == 2 and len(digests) == 1
    launch = (summary_path.parent / "launch.yaml").read_text()
    assert "node_rank: slurm" in launch and f"master_port: {20000 + int(job_id) % 20000}" in launch

    # a user's own entry point (a plain DDP script) through the same sbatch path, its arguments after --
    job_id = _submit_and_wait(
        env, tmp_path, "--device", "cpu", "--nproc", "2", "--log-dir", str(log_dir), "--run-name", "byo",
        "--script", str(DDP_SCRIPT), "--", "--steps", "3", "--device", "cpu",
    )  # fmt: skip
    output = (log_dir / f"slurm-islab-rsl_rl-{job_id}.out").read_text()
    (run_dir,) = log_dir.glob("script/ddp_finetune/*_byo")
    assert (run_dir / "finetune.pt").is_file(), output[-3000:]
    assert "step 3/3" in (run_dir / "logs" / "rank_0.log").read_text()
    assert "rank 1 done: world 2" in (run_dir / "logs" / "rank_1.log").read_text()


DDP_SCRIPT = FIXTURES / "ddp_finetune.py"


def _submit_and_wait(env: dict[str, str], cwd: Path, *args: str, wait_s: float = 150) -> str:
    """islab-train sbatch ARGS > job.sh; sbatch job.sh; wait until the job has left the queue."""
    job_id = _submit(env, cwd, *args)
    _wait_gone(env, job_id, wait_s)
    return job_id


def _submit(env: dict[str, str], cwd: Path, *args: str) -> str:
    """islab-train sbatch ARGS > job.sh; sbatch job.sh; the job id."""
    generated = subprocess.run([sys.executable, "-m", "islab.cli", "sbatch", *args], capture_output=True,
                               text=True, env=env, cwd=cwd, timeout=60)  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    job = cwd / "job.sh"
    job.write_text(generated.stdout)
    submitted = subprocess.run(
        ["sbatch", "--parsable", str(job)], capture_output=True, text=True, env=env, cwd=cwd, timeout=30
    )
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def _job(env: dict[str, str], job_id: str) -> dict[str, str]:
    """``scontrol show job`` as KEY: VALUE ({} when slurmctld did not answer this time: ask again).
    squeue cannot tell a finished job from an unanswered query, and lists no finished job at all."""
    shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, env=env,
                           timeout=30)  # fmt: skip
    if shown.returncode != 0:
        return {}
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


_FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def _wait_gone(env: dict[str, str], job_id: str, wait_s: float, restarts: int = 0) -> None:
    """Until the job has ended for good (a final state, after ``restarts`` requeues)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        job = _job(env, job_id)
        if job.get("JobState") in _FINAL_STATES and int(job.get("Restarts", "0")) >= restarts:
            return
        time.sleep(1)
    pytest.fail(f"job {job_id} has not ended after {wait_s:.0f} s: {_job(env, job_id)}")


def test_sbatch_requeue_adds_the_requeue_and_signal_lines(islab):
    code, script, err = islab("sbatch", "--device", "cpu", "--nproc", "2", "--requeue", "--signal-before", "90")
    assert code == 0, err
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --requeue" in header and "#SBATCH --signal=B:USR1@90" in header
    code, script, _ = islab("sbatch", "--device", "cpu", "--nproc", "2")
    assert "--requeue" not in script and "--signal" not in script  # only when asked
    code, _, err = islab("sbatch", "--device", "cpu", "--requeue", "--signal-before", "0")
    assert code == 2 and err.startswith("error: --signal-before: must be at least 1 second")


def test_a_slurm_job_names_its_run_directory_after_the_job_id(islab, monkeypatch):
    """A requeued job (same id) must find its run directory, and so its checkpoint, again."""
    for name, value in srun_environ(SLURM_STEP_NUM_NODES="1", SLURM_NNODES="1", SLURM_NODEID="0",
                                    SLURM_STEP_NODELIST="gpu01", SLURM_JOB_NODELIST="gpu01",
                                    SLURM_STEP_TASKS_PER_NODE="1").items():  # fmt: skip
        monkeypatch.setenv(name, value)
    code, out, err = islab("--device", "cpu", "--log-dir", "runs", "--run-name", "x", "--dry-run")
    assert code == 0, err
    assert "# run dir: runs/rsl_rl/Islab-Cartpole-v0/slurm-123456_x" in out
    code, out, _ = islab("--device", "cpu", "--log-dir", "runs", "--no-slurm", "--dry-run")
    assert "slurm-123456" not in out


# How the job is stopped mid-run: what `scontrol requeue` does (SIGTERM to every process of the step;
# SLURM queues the job again), and what `#SBATCH --signal=B:USR1@N` does near the time limit (SIGUSR1
# to the batch shell only; the script forwards it to srun and, once islab-train exited 75, requeues).
STOPS = {
    "scontrol-requeue": lambda job_id: ["scontrol", "requeue", job_id],
    "time-limit-usr1": lambda job_id: ["scancel", "--batch", "--signal=USR1", job_id],
}


def _start_requeued_job_now(env: dict[str, str], job_id: str, wait_s: float) -> None:
    """SLURM holds a requeued job back for 120 s (PENDING, Reason=BeginTime): start it now. Asked
    again until it runs: an update made while the requeue is still completing is overwritten by it
    (a single update once the job read PENDING left the job waiting in some runs). Not within the
    second the job's credential was revoked: slurmd compares the new credential's creation time with
    the revocation in whole seconds and kills the restarted job ("Job credential revoked"; seen
    here when the job was started 0.3 s after its requeue)."""
    deadline = time.monotonic() + wait_s
    pending_since = None
    while time.monotonic() < deadline:
        job = _job(env, job_id)
        # right after the requeue the job reads COMPLETING or REQUEUED with Restarts=1: not started yet
        if int(job.get("Restarts", "0")) >= 1 and job.get("JobState") in {"RUNNING", *_FINAL_STATES}:
            return
        if job.get("JobState") == "PENDING" and pending_since is None:
            pending_since = time.monotonic()
        if pending_since is not None and time.monotonic() - pending_since >= 2:
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, capture_output=True,
                           timeout=30)  # fmt: skip
        time.sleep(1)
    pytest.fail(f"job {job_id} was not requeued and started again within {wait_s:.0f} s: {_job(env, job_id)}")


@pytest.mark.slow
@pytest.mark.parametrize("stop", list(STOPS))
def test_requeued_job_resumes_by_itself_and_loses_at_most_one_iteration(slurm_cluster, tmp_path, stop):
    """Stopped mid-run, the ranks finish their iteration, rank 0 checkpoints it (exit 75), the job is
    queued again under the same id, and the new run continues from its run directory's latest.pt to
    the original target."""
    env, base = slurm_cluster
    env = child_env("ISLAB_", base=env)
    log_dir = tmp_path / "runs"
    target = 12
    print(f"slurmctld log: {base / 'slurmctld.log'}")
    job_id = _submit(
        env, tmp_path, "--requeue", "--device", "cpu", "--nproc", "2", "--num-envs", "64",
        "--max-iterations", str(target), "--checkpoint-interval", "1000", "--log-dir", str(log_dir),
    )  # fmt: skip
    run_dir = log_dir / "rsl_rl" / "Islab-Cartpole-v0" / f"slurm-{job_id}"
    output = log_dir / f"slurm-islab-rsl_rl-{job_id}.out"

    def reported() -> int:
        return max((record["iteration"] for record in rundir.read_progress(run_dir / "progress.jsonl")), default=0)

    deadline = time.monotonic() + 120
    while reported() < 2:
        assert time.monotonic() < deadline, output.read_text() if output.exists() else "no job output"
        time.sleep(0.1)
    before = reported()
    stopped = subprocess.run(STOPS[stop](job_id), capture_output=True, text=True, env=env, timeout=30)
    assert stopped.returncode == 0, stopped.stderr
    _start_requeued_job_now(env, job_id, wait_s=120)
    _wait_gone(env, job_id, wait_s=120, restarts=1)
    summary = json.loads((run_dir / "summary.json").read_text())
    text = output.read_text()
    assert summary["iteration"] == target, text[-3000:]
    resumed = summary["resumed"]
    assert resumed["reason"] == "SLURM requeue 1", text[-3000:]
    # the checkpoint of the first run holds the iteration under way at the requeue (or the next one)
    assert before <= resumed["iteration"] <= before + 2, (before, resumed)
    assert resumed["lost_iterations"] <= 1, resumed
    assert summary["start_iteration"] == resumed["iteration"] and summary["iterations"] == target - resumed["iteration"]
