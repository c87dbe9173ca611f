"""What keeps the pre-flight short (docs/NCCL.md, "Benchmark"): torchrun and the probe ranks end
without the interpreter's teardown (islab.preflight.quick_exit), torchrun forks the probe ranks
from its agent (torch imported once per node), CPU ranks time the 64 MB all-reduce
twice instead of four times, and the supervisor finds a job's processes without scanning all of
/proc. Cheap processes only (no torch); the real launches are in tests/preflight/test_preflight_launch.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

from paths import SRC

from islab.plan.plan import build_plan
from islab.plan.preflight import probe_file, probe_plan
from islab.plan.torchrun import QUICK_EXIT_MODULE
from islab.preflight.probe import SIZES_BYTES, repeats_of
from islab.run import process_tree as tree
from islab.spec.run_spec import RunSpec


def _quick_exit(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.py").write_text(textwrap.dedent(body))
    argv = [sys.executable, "-m", QUICK_EXIT_MODULE, *args]
    env = {"PYTHONPATH": f"{tmp_path}:{SRC}", "PATH": "/usr/bin:/bin"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


def test_quick_exit_runs_the_module_as_python_m_and_keeps_its_status_and_atexit(tmp_path):
    body = """
        import atexit, sys
        atexit.register(lambda: print("atexit ran", flush=True))
        print("argv", sys.argv[1:], __name__)
        sys.exit(int(sys.argv[1]))
    """
    done = _quick_exit(tmp_path, body, "-m", "job", "3", "--x")
    assert done.returncode == 3 and "argv ['3', '--x'] __main__" in done.stdout and "atexit ran" in done.stdout
    assert _quick_exit(tmp_path, body, "-m", "job", "0").returncode == 0
    message = _quick_exit(tmp_path, "raise SystemExit('stopped: bad input')\n", "-m", "job")
    assert message.returncode == 1 and "stopped: bad input" in message.stderr
    # an exception propagates as under python -m: traceback, status 1
    crash = _quick_exit(tmp_path, "raise RuntimeError('boom')\n", "-m", "job")
    assert crash.returncode == 1 and "RuntimeError: boom" in crash.stderr
    assert _quick_exit(tmp_path, "", "job").returncode == 2  # usage: -m MODULE


def test_the_probe_plan_runs_torchrun_under_quick_exit_and_keeps_every_option():
    spec = RunSpec(device="cpu", nproc_per_node=2)
    plan = build_plan(spec, now=datetime(2026, 1, 1), free_port=29555)
    argv = probe_plan(plan, spec, 20).node(0).argv
    assert argv[1:5] == ("-m", QUICK_EXIT_MODULE, "-m", "torch.distributed.run")
    # every rank forked from torchrun's agent (torch imported once), running the probe's file
    assert argv[5:8] == ("--run-path", "--start-method", "fork") and argv[-7] == probe_file()
    # the launcher's own --tee / --log-dir still find torchrun
    from islab.plan.torchrun import supervised_argv

    assert supervised_argv(argv, "LOGS")[5:9] == ("--tee", "3", "--log-dir", "LOGS")


def test_cpu_ranks_time_the_largest_all_reduce_twice_without_warm_up():
    """The claims, not the table: over gloo a 64 MB all-reduce takes 0.2-0.8 s here, so the CPU's
    largest size is timed twice with no warm-up; NCCL moves it in milliseconds and keeps a warm-up;
    the smaller sizes are the same on both devices, the first one warming the connections up."""
    largest = SIZES_BYTES[-1]
    assert repeats_of(largest, "cpu") == (0, 2)
    warm_up, timed = repeats_of(largest, "cuda:1")
    assert warm_up >= 1 and timed > 2
    for size in SIZES_BYTES[:-1]:
        assert repeats_of(size, "cpu") == repeats_of(size, "cuda:0")
    assert repeats_of(SIZES_BYTES[0], "cpu")[0] >= 1  # the first size pays the connection set-up
    # calls per size never grow with the size: the big ones are the slow ones
    timed_calls = [repeats_of(size, "cpu")[1] for size in SIZES_BYTES]
    assert timed_calls == sorted(timed_calls, reverse=True)


def test_the_process_tree_walk_matches_a_full_scan(monkeypatch):
    child = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        for _ in range(100):
            walked = tree.process_tree([child.pid])
            if len(walked) == 2:
                break
            time.sleep(0.05)
        monkeypatch.setattr(tree, "_walk_children", lambda roots, proc: None)  # a kernel without them
        assert tree.process_tree([child.pid]) == walked and len(walked) == 2
    finally:
        for pid in [*tree.process_tree([child.pid]), child.pid]:
            os.kill(pid, signal.SIGKILL)
        child.wait()
