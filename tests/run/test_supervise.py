"""supervise.py: exit codes, failing ranks, signal forwarding -- with throwaway child scripts."""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import MappingProxyType

import pytest
from netns import pid_alive
from ports import port_is_free

from islab import rundir
from islab.doctor import probes
from islab.plan.launch_plan import LaunchPlan, NodePlan, RankLaunch
from islab.run import failures, supervise, torchrun_node

PY = sys.executable


def launcher_plan(argv: list[str], run_dir: str = "run", env: dict[str, str] | None = None) -> LaunchPlan:
    node = NodePlan(0, tuple(argv), MappingProxyType(env or {}))
    return LaunchPlan("torchrun", run_dir, (node,))


def ranks_plan(scripts: list[str], run_dir: str, tmp_path: Path) -> LaunchPlan:
    """A skrl-JAX-style plan whose ranks run the given python snippets."""
    ranks = []
    for rank, code in enumerate(scripts):
        script = tmp_path / f"rank{rank}.py"
        script.write_text(textwrap.dedent(code))
        env = {"JAX_RANK": str(rank), "JAX_LOCAL_RANK": str(rank)}
        ranks.append(RankLaunch(rank, rank, (PY, str(script)), MappingProxyType(env)))
    node = NodePlan(0, ("python", "-m", "skrl.utils.distributed.jax"), MappingProxyType({}), tuple(ranks))
    return LaunchPlan("skrl-jax", run_dir, (node,))


def run_quiet(plan: LaunchPlan, **kwargs: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = supervise.run_plan(plan, 0, stdout=out, stderr=err, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


# ----------------------------------------------------------------------------------------------
# Exit codes and output
# ----------------------------------------------------------------------------------------------


def test_launcher_exit_code_is_passed_through_and_output_streamed(tmp_path):
    code, out, err = run_quiet(launcher_plan([PY, "-c", "print('hello'); import sys; sys.exit(3)"], str(tmp_path)))
    assert code == 3
    assert "hello" in out
    assert "torchrun exit code 3" in err


def test_launcher_success_is_zero_and_plan_env_reaches_child(tmp_path):
    child = "import os; print('X=' + os.environ['ISLAB_PROBE'])"
    code, out, _ = run_quiet(launcher_plan([PY, "-c", child], env={"ISLAB_PROBE": "42"}))
    assert code == 0
    assert "X=42" in out


def test_death_by_signal_becomes_128_plus_n():
    code, _, _ = run_quiet(launcher_plan([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]))
    assert code == 128 + signal.SIGKILL


def test_torchrun_failure_summary_names_the_failed_rank(tmp_path):
    summary = textwrap.dedent(
        """
        import sys
        sys.stderr.write('''torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        islab.worker FAILED
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2026-01-01_00:00:00
          host      : node0
          rank      : 1 (local_rank: 1)
          exitcode  : 1 (pid: 123)
        ''')
        sys.exit(1)
        """
    )
    code, _, err = run_quiet(launcher_plan([PY, "-c", summary], str(tmp_path / "run")))
    assert code == 1
    assert "rank 1 failed" in err
    assert str(tmp_path / "run" / "logs" / "rank_1.log") in err


def test_failed_ranks_from_logs_finds_tracebacks(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank_0.log").write_text("training...\n")
    (logs / "rank_1.log").write_text("Traceback (most recent call last):\n  boom\nRuntimeError: x\n")
    assert failures.failed_ranks_from_logs(str(tmp_path)) == [1]


RANK_LOG = """\
[islab] rank 0 iteration 1
Traceback (most recent call last):
  File "lib.py", line 3, in caught
ValueError: printed by the library, training went on
[islab] rank 0 iteration 2
Traceback (most recent call last):
  File "storage.py", line 230, in mini_batch_generator
    mini_batch_size = batch_size // num_mini_batches
                      ~~~~~~~~~~~^^~~~~~~~~~~~~~~~~~
ZeroDivisionError: integer division or modulo by zero

During handling of the above exception, another exception occurred:

[rank0]: Traceback (most recent call last):
[rank0]:   File "runner.py", line 9, in learn
[rank0]:     raise RuntimeError("update failed")
[rank0]: RuntimeError: update failed
[rank0]: see above

"""


def test_a_failed_ranks_last_traceback_is_taken_whole_with_what_it_was_raised_from():
    """Issue 30 item 4: the console shows the failing rank's last exception whole (its chain
    included, prefixes gone), not a tail of its log nor an earlier traceback the rank survived."""
    shown = failures.last_traceback(RANK_LOG.splitlines())
    assert shown[0] == "Traceback (most recent call last):" and shown[2].endswith("batch_size // num_mini_batches")
    assert "ValueError: printed by the library, training went on" not in shown
    assert shown[-3:] == ['    raise RuntimeError("update failed")', "RuntimeError: update failed", "see above"]
    assert failures.last_traceback(["no traceback here"]) == []


def test_the_override_a_traceback_points_at_is_named():
    chained = failures.last_traceback(RANK_LOG.splitlines())
    assert failures.suspected_overrides(chained, ["algorithm.num_mini_batches=0", "algorithm.gamma=0.9"]) == [
        "algorithm.num_mini_batches=0"
    ]  # its name is in the failing line
    adam = ["Traceback (most recent call last):", '  File "adam.py", line 5', "ValueError: Invalid learning rate: -1"]
    assert failures.suspected_overrides(adam, ["algorithm.learning_rate=-1"]) == ["algorithm.learning_rate=-1"]
    assert failures.suspected_overrides(adam, ["optim.lr=-1"]) == ["optim.lr=-1"]  # its value is in the message
    assert failures.suspected_overrides(adam, ["algorithm.gamma=0", "algorithm.lam=1"]) == []  # lone digits
    lines = failures.failed_rank_lines(0, "rank_0.log", RANK_LOG.splitlines(), ["algorithm.num_mini_batches=0"],
                                       shown=False, clueless=False)  # fmt: skip
    assert lines.startswith("  rank 0's traceback (rank_0.log):\n    Traceback (most recent call last):\n")
    likely = "  likely cause: the agent-config override algorithm.num_mini_batches=0 (num_mini_batches is in the"
    assert lines.rstrip().splitlines()[-1].startswith(likely), lines


TORCHRUN_SUMMARY = """\
islab.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_02:02:26
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 6323)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 6323
[2]:
  rank      : 3 (local_rank: 1)
  exitcode  : 2 (pid: 6325)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_02:02:25
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 6324)
"""


def test_torchrun_summary_root_cause_first_and_collateral_ranks_left_out(tmp_path):
    def ranks(lines):  # no error files (killed ranks write none), no rank logs: the summary alone
        return [rank for rank, _, _ in torchrun_node.find_failures(None, lines, str(tmp_path), 0)]

    assert ranks(TORCHRUN_SUMMARY.splitlines()) == [1, 3]
    only_stopped = TORCHRUN_SUMMARY.split("[2]:")[0].splitlines()
    assert ranks(only_stopped) == [0]
    assert ranks(["no summary here"]) == []


# ----------------------------------------------------------------------------------------------
# Ranks supervised directly (skrl-JAX)
# ----------------------------------------------------------------------------------------------


def test_failing_rank_stops_the_others_and_is_named(tmp_path):
    pid_file = tmp_path / "rank0.pid"
    sleeper = f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
        """
    failer = f"""
        import os, sys, time
        while not os.path.exists({str(pid_file)!r}):  # rank 0 is up
            time.sleep(0.01)
        print("rank one is failing")
        sys.exit(3)
        """
    started = time.monotonic()
    code, out, err = run_quiet(ranks_plan([sleeper, failer], str(tmp_path / "run"), tmp_path))
    took = time.monotonic() - started
    assert code == 3
    # the peer sleeps 60 s; stopped, the run ends in ~0.2 s (a generous bound: a loaded machine)
    assert took < 30, f"the sleeping peer must be stopped, not waited for: the run took {took:.1f} s"
    assert "rank 1 (node 0, local rank 1) exited with code 3" in err
    assert str(tmp_path / "run" / "logs" / "rank_1.log") in err
    assert "rank one is failing" in err  # last output quoted in the message
    assert "[rank 1] rank one is failing" in out
    assert not pid_alive(int(pid_file.read_text()))


def test_all_ranks_succeeding_is_zero_and_ranks_get_their_env(tmp_path):
    code_template = "import os; print('rank', os.environ['JAX_RANK'], 'local', os.environ['JAX_LOCAL_RANK'])"
    code, out, err = run_quiet(ranks_plan([code_template, code_template], str(tmp_path), tmp_path))
    assert code == 0, err
    assert "[rank 0] rank 0 local 0" in out
    assert "[rank 1] rank 1 local 1" in out


def test_rank_killed_by_signal_fails_the_run(tmp_path):
    killer = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    code, _, err = run_quiet(ranks_plan(["import time; time.sleep(30)", killer], str(tmp_path), tmp_path))
    assert code == 128 + signal.SIGTERM
    assert "rank 1" in err


# ----------------------------------------------------------------------------------------------
# Signals sent to islab-train itself
# ----------------------------------------------------------------------------------------------

DRIVER = """
import sys
import tempfile
from types import MappingProxyType
from islab.run import supervise
from islab.plan.launch_plan import LaunchPlan, NodePlan
child = sys.argv[1]
plan = LaunchPlan("torchrun", "run", (NodePlan(0, (sys.executable, "-c", child), MappingProxyType({{}})),))
sys.exit(supervise.run_plan(plan, 0, grace_s={grace}, preempt_grace_s={preempt_grace}))
"""


def start_driver(
    tmp_path: Path, child_code: str, grace: float = 10.0, preempt_grace: float = 10.0
) -> subprocess.Popen[bytes]:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(grace=grace, preempt_grace=preempt_grace))
    return subprocess.Popen([PY, str(driver), child_code], cwd=tmp_path)


def wait_for(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize(("signum", "expected"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_is_forwarded_to_the_group_and_exit_is_128_plus_n(tmp_path, signum, expected):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    driver = start_driver(tmp_path, child)
    child_pid = int(wait_for(pid_file))
    driver.send_signal(signum)
    assert driver.wait(timeout=15) == expected
    assert not pid_alive(child_pid)


@pytest.mark.parametrize(("signum", "expected"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_child_ignoring_the_signal_is_killed_after_the_grace_period(tmp_path, signum, expected):
    """SIGINT: after the 5 s grace (0.5 here); SIGTERM, which asks the ranks to checkpoint first:
    after the preemption grace (30 s; 2 here), and not before it."""
    pid_file = tmp_path / "child.pid"
    child = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    driver = start_driver(tmp_path, child, grace=0.5, preempt_grace=2.0)
    child_pid = int(wait_for(pid_file))
    started = time.monotonic()
    driver.send_signal(signum)
    assert driver.wait(timeout=45) == expected
    took = time.monotonic() - started
    # SIGINT: grace 0.5 s then SIGKILL (~0.6 s); SIGTERM: preemption grace 2 s then SIGKILL; without
    # the SIGKILL the child would sleep on for 60 s. Generous upper bound for a loaded machine.
    assert took < 30, f"the child ignoring {signum.name} was gone only after {took:.1f} s"
    assert took >= 2.0 or signum == signal.SIGINT, f"SIGKILLed {took:.1f} s after SIGTERM, before the grace"
    assert not pid_alive(child_pid)


# ----------------------------------------------------------------------------------------------
# Machine probes
# ----------------------------------------------------------------------------------------------


def test_free_port_probe_and_port_in_use():
    port = probes.find_free_port()
    assert port_is_free(port)
    with socket.socket() as listener:  # free means a listener can take it, as torchrun's store will
        listener.bind(("", port))
        listener.listen()
        assert not port_is_free(port)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert not port_is_free(busy.getsockname()[1])


WRITE_DIGESTS = """
import sys
from islab import rundir
for rank, sha in enumerate(sys.argv[2:]):
    rundir.write_digest(sys.argv[1], rank, sha * 64, world_size=len(sys.argv) - 2)
"""


def test_ranks_that_end_with_different_policies_fail_the_run_naming_them(tmp_path):
    run_dir = str(tmp_path / "run")
    code, _, err = run_quiet(launcher_plan([PY, "-c", WRITE_DIGESTS, run_dir, "a", "b", "a", "c"], run_dir))
    assert code == 1
    assert err.splitlines()[-1] == (
        f"error: the ranks ended with different policies: ranks 0, 2 have {'a' * 12}, rank 1 has {'b' * 12}, "
        f"rank 3 has {'c' * 12} (sha256 in {tmp_path / 'run' / 'digests'}); gradients or normalizer statistics "
        "were not kept in sync across ranks"
    )


def test_equal_digests_pass_and_those_of_ranks_a_resumed_run_no_longer_has_are_not_compared(tmp_path):
    run_dir = str(tmp_path / "run")
    rundir.write_digest(run_dir, 2, "b" * 64, world_size=3)  # left by an earlier run with 3 ranks
    rundir.write_json(rundir.digest_path(run_dir, 3), {"rank": 3, "policy_sha256": "c" * 64})  # no world size
    code, _, err = run_quiet(launcher_plan([PY, "-c", WRITE_DIGESTS, run_dir, "a", "a"], run_dir))
    assert code == 0, err
    assert rundir.read_digests(run_dir) == {0: "a" * 64, 1: "a" * 64}
    # a launcher that failed keeps its own exit code and message, whatever the digests say
    code, _, err = run_quiet(launcher_plan([PY, "-c", WRITE_DIGESTS + "sys.exit(3)", run_dir, "a", "b"], run_dir))
    assert code == 3 and "different policies" not in err


def test_write_launch_record_creates_run_dir(tmp_path):
    target = rundir.write_launch_record(str(tmp_path / "a" / "b"), {"spec": {"lib": "rsl_rl"}})
    assert target == tmp_path / "a" / "b" / "launch.yaml"
    assert "lib: rsl_rl" in target.read_text()


# ----------------------------------------------------------------------------------------------
# Failed ranks from torch's error files (TORCHELASTIC_ERROR_FILE, written by @record)
# ----------------------------------------------------------------------------------------------


def write_error_file(root: Path, attempt: int, local_rank: int, message: str, timestamp: int) -> None:
    folder = root / "run_abc123" / f"attempt_{attempt}" / str(local_rank)
    folder.mkdir(parents=True)
    data = {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": timestamp}}}
    (folder / "error.json").write_text(json.dumps(data))


def test_error_files_of_the_latest_attempt_earliest_first(tmp_path):
    write_error_file(tmp_path, 0, 0, "RuntimeError: first attempt", 100)
    write_error_file(tmp_path, 1, 1, "ValueError: later\nsecond line", 300)
    write_error_file(tmp_path, 1, 0, "RuntimeError: earlier", 200)
    assert torchrun_node.error_file_failures(tmp_path) == [(0, "RuntimeError: earlier"), (1, "ValueError: later")]
    assert torchrun_node.error_file_failures(tmp_path / "missing") == []


def test_a_signal_death_named_by_the_summary_comes_before_the_ranks_it_took_down(tmp_path):
    write_error_file(tmp_path, 0, 0, "RuntimeError: Connection closed by peer", 100)
    summary = ["Root Cause (first observed failure):", "[0]:", "  rank      : 3 (local_rank: 1)", "  exitcode  : -9"]
    # node 1 of a 2 x 2 job: the summary maps local ranks to global ones
    assert torchrun_node.find_failures(str(tmp_path), summary, str(tmp_path), 0) == [
        (3, -9, None), (2, None, "RuntimeError: Connection closed by peer")
    ]  # fmt: skip
    assert torchrun_node.find_failures(str(tmp_path), [], str(tmp_path), 2) == [
        (2, None, "RuntimeError: Connection closed by peer")
    ]


def test_a_killed_rank_comes_before_a_root_cause_that_only_lost_its_peer(tmp_path):
    """CI's case: rank 1 SIGKILLed; rank 0's gloo read failed and its error file, stamped first,
    made it torchrun's root cause. The killed rank is the cause; the lost peer comes after it."""
    lost = "RuntimeError: [pair.cc:537] Read error [127.0.0.1]:8064: Connection reset by peer"
    write_error_file(tmp_path, 0, 0, lost, 100)
    summary = [
        "Failures:", "[1]:", "  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 7)",
        "Root Cause (first observed failure):", "[0]:", "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 6)",
    ]  # fmt: skip
    found = torchrun_node.find_failures(str(tmp_path), summary, str(tmp_path), 0)
    assert [(rank, code) for rank, code, _ in found] == [(1, -9), (0, 1)]
    # a rank torchrun stopped with SIGTERM is collateral: named only when nothing else is known
    stopped = ["Failures:", "[1]:", "  rank      : 1 (local_rank: 1)", "  exitcode  : -15 (pid: 7)"]
    write_error_file(tmp_path, 1, 0, "ValueError: the real cause", 200)
    assert torchrun_node.find_failures(str(tmp_path), stopped + summary[4:], str(tmp_path), 0) == [
        (0, 1, "ValueError: the real cause")
    ]
    assert torchrun_node.find_failures(None, stopped, str(tmp_path), 0) == [(1, -15, None)]


RECORDED_RANK = """
import os, sys
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if os.environ["LOCAL_RANK"] == "1":
        sys.stderr = open(os.devnull, "w")  # no traceback on the console: only the error file tells
        raise RuntimeError("boom, told by the error file")

main()
"""


def test_real_torchrun_failure_is_named_from_the_error_file(tmp_path, monkeypatch):
    # A temporary root of this test's own: other runs on the machine make islab-torchrun-* folders too.
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    script = tmp_path / "rank.py"
    script.write_text(RECORDED_RANK)
    argv = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1", "--node_rank", "0",
            "--master_addr", "127.0.0.1", "--master_port", str(probes.find_free_port()), str(script)]  # fmt: skip
    code, _, err = run_quiet(launcher_plan(argv, str(tmp_path / "run")))
    assert code == 1, err
    error = err.rstrip().splitlines()[-1]
    assert "rank 1 failed with RuntimeError: boom, told by the error file" in error, err
    # torchrun's --log-dir of this launch was made under the test's own root, and is gone
    assert [Path(d).parent for d in made if Path(d).name.startswith("islab-torchrun-")] == [temp_root]
    assert list(temp_root.glob("islab-torchrun-*")) == []


def test_a_skrl_jax_rank_gets_an_error_file_and_is_named_from_it(tmp_path):
    recorder = """
        import os
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler
        ErrorHandler().record_exception(RuntimeError("only in the error file"))
        os._exit(1)
        """
    code, _, err = run_quiet(ranks_plan(["import time; time.sleep(30)", recorder], str(tmp_path / "run"), tmp_path))
    assert code == 1
    assert "rank 1 (node 0, local rank 1) exited with code 1: RuntimeError: only in the error file" in err


def test_skrl_jax_blames_the_killed_rank_not_the_one_that_lost_its_peer():
    """CI's case: rank 1 SIGKILLed; rank 0 raised gloo's 'Connection reset by peer' and was seen first."""
    from islab.run.skrl_jax_node import _root_cause

    lost = "JaxRuntimeError: UNKNOWN: Gloo all-reduce failed: [pair.cc:538] Read error: Connection reset by peer"
    exceptions = {0: lost, 1: None}
    assert _root_cause(0, [1, 137], exceptions.get) == 1  # killed by SIGKILL: the cause
    assert _root_cause(0, [1, -9], exceptions.get) == 1
    assert _root_cause(0, [1, 143], exceptions.get) == 0  # SIGTERM is ours (stopping the others)
    assert _root_cause(0, [1, 1], {0: lost, 1: "RuntimeError: boom"}.get) == 1
    assert _root_cause(0, [1, 137], {0: "RuntimeError: own", 1: None}.get) == 0


def test_torchruns_failure_dump_stays_off_the_console_while_the_ranks_lines_pass(tmp_path):
    """Issue 23 item 13: a failed rank's cause is the supervisor's one error line (rank, exception from
    the error file, log); torchrun's own error record, traceback and ChildFailedError table are not
    printed again (lines as torch 2.13's torchrun writes them), and rank 0's traceback is one line."""
    from collections import deque

    from islab.run.console import ConsolePolicy, RunView
    from islab.run.processes import Child, _pump

    output = [
        "[default0]:[islab] rank 0/2 on cpu",
        "[default0]:[rank0]: Traceback (most recent call last):",
        '[default0]:[rank0]:   File "/src/islab/worker/__main__.py", line 181, in run',
        "[default0]:[rank0]: ValueError: could not convert string to float: 'abc'",
        "W1125 15:31:00.100000 4242 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 4244 "
        "closing signal SIGTERM",
        "E1125 15:31:00.123000 4242 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) "
        "local_rank: 0 (pid: 4243) of binary: /usr/bin/python",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "islab.worker FAILED",
        "Failures:",
        "  rank      : 1 (local_rank: 1)",
    ]
    pipe = io.BytesIO("".join(f"{line}\n" for line in output).encode())
    sink, tail = io.StringIO(), deque(maxlen=50)
    view = RunView(str(tmp_path), io.StringIO(), live=False, progress=False)
    child = Child(("torchrun",), {}, rank=None, first_rank=0)
    _pump(pipe, sink, "err", child, tail, view, ConsolePolicy(), lambda rank, line: None, lambda: False)
    shown = sink.getvalue()
    log = rundir.rank_log(str(tmp_path), 0)
    # rank 0's own words pass, its traceback as one line naming the log that holds it
    assert (
        shown.splitlines()[1] == f"[rank 0] ValueError: could not convert string to float: 'abc' (traceback in {log})"
    )
    for dump in ("Traceback", "__main__.py", "closing signal", "failed (exitcode: 1)", "ChildFailedError",
                 "_run_module_as_main", "Failures:", "rank      : 1"):  # fmt: skip
        assert dump not in shown, shown
    assert list(tail)[-1] == "  rank      : 1 (local_rank: 1)"  # still read to name the failed rank
