"""Hang detection, the pieces: reading a faulthandler dump, choosing who is behind, the message,
and the hang watch against a real stuck process (the end-to-end run through the launcher is in
tests/run/test_signals.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from netns import wait_until

from islab import rundir
from islab.run.hangs import Frame, HangWatch, Stuck, hang_message, innermost_frame, ranks_behind

MAIN = 0x00007F7962A62B80
DUMP = f"""[islab] rank 1/2 ...
Thread 0x00007f7961ffc6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x{MAIN:016x} (most recent call first):
  File "/src/islab/worker/faults.py", line 71 in maybe_hang
  File "/src/islab/worker/faults.py", line 40 in maybe_inject_fault
  File "/src/islab/libs/base.py", line 103 in report_iteration

Current thread 0x00007f7900000001 (most recent call first):
  <no Python frame>
"""


def test_innermost_frame_of_the_main_thread_in_a_faulthandler_dump():
    assert innermost_frame(DUMP, MAIN) == Frame("/src/islab/worker/faults.py", 71, "maybe_hang")
    assert str(innermost_frame(DUMP, MAIN)) == "/src/islab/worker/faults.py:71 in maybe_hang"
    # without the thread id: the "Current thread" block when it has frames, else the last thread listed
    assert innermost_frame(DUMP) == Frame("/src/islab/worker/faults.py", 71, "maybe_hang")
    current = (
        'Thread 0x1 (most recent call first):\n  File "a.py", line 1 in f\n\n'
        'Current thread 0x2 (most recent call first):\n  File "b.py", line 2 in g\n  File "c.py", line 3 in h\n'
    )
    assert innermost_frame(current) == Frame("b.py", 2, "g")
    # two dumps of one process: the newest counts
    assert innermost_frame(DUMP + DUMP.replace("line 71", "line 99"), MAIN).line == 99
    assert innermost_frame("no dump here\nTraceback (most recent call last):\n") is None


def test_ranks_behind_are_those_below_the_newest_iteration_else_all():
    assert ranks_behind({0: 2, 1: 1, 2: 2, 3: 1}) == [1, 3]
    assert ranks_behind({0: 5, 1: 5}) == [0, 1]
    assert ranks_behind({}) == []


def test_hang_message_is_one_line_naming_rank_frame_and_log():
    stuck = [Stuck(0, 2, "run/logs/rank_0.log", Frame("dist.py", 5, "all_reduce")),
             Stuck(1, 1, "run/logs/rank_1.log", Frame("faults.py", 71, "maybe_hang"))]  # fmt: skip
    message = hang_message(10, stuck, [1], "run")
    assert "\n" not in message and message.startswith("error: hang: no rank finished an iteration for 10 s")
    assert "rank 1 is behind (last finished iteration 1; the others 2): rank 1 at faults.py:71 in maybe_hang" in message
    assert "run/logs/rank_1.log" in message and "rank_0.log" not in message and message.endswith("Run directory: run")
    equal = hang_message(10, [Stuck(0, 2, "l0", None), Stuck(1, 2, "l1", None)], [0, 1], "run")
    assert "no rank is behind (all finished iteration 2" in equal and "rank 0 at an unknown place" in equal


STUCK_RANK = """
import faulthandler, sys, time
from pathlib import Path
from islab import rundir
run_dir, done = Path(sys.argv[1]), int(sys.argv[2])
log = open(rundir.rank_log(run_dir, 3), "a", buffering=1)
faulthandler.register(rundir.STACK_DUMP_SIGNAL, file=log, all_threads=True)
rundir.write_heartbeat(run_dir, 3, iteration=7, done=done)
def stuck_here():
    print("ready", flush=True)  # from inside: the dump may come at once
    time.sleep(120)
stuck_here()
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stuck_rank(tmp_path):
    """A real process that registered faulthandler like a rank, wrote a heartbeat and sleeps."""
    script = tmp_path / "stuck_rank.py"
    script.write_text(textwrap.dedent(STUCK_RANK))
    rundir.logs_dir(tmp_path).mkdir()
    started = []

    def start(done: int) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(done)], stdout=subprocess.PIPE,
                                   text=True)  # fmt: skip
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_hang_watch_dumps_the_stuck_rank_and_names_it(tmp_path, stuck_rank):
    process = stuck_rank(done=1)
    script = tmp_path / "stuck_rank.py"
    clock = Clock()
    watch = HangWatch(str(tmp_path), 10, clock=clock)
    assert not watch({process.pid})  # progress seen now
    clock.now += 9.5
    assert not watch({process.pid})
    clock.now += 1
    assert watch({process.pid})
    log = rundir.rank_log(tmp_path, 3).read_text()
    assert "(most recent call first):" in log and "in stuck_here" in log
    assert process.poll() is None  # the dump signal does not end the rank (the poll loop stops the job)
    assert watch.behind == [3]
    (stuck,) = watch.stuck
    assert (stuck.rank, stuck.iteration, stuck.log) == (3, 7, str(rundir.rank_log(tmp_path, 3)))
    assert stuck.frame is not None and (stuck.frame.file, stuck.frame.function) == (str(script), "stuck_here")
    assert f"rank 3 at {script}:{stuck.frame.line} in stuck_here" in watch.message()


def test_no_hang_before_the_first_finished_iteration(tmp_path, stuck_rank):
    """Warm-up (done 0) is not progress: the watch waits for training to start."""
    process = stuck_rank(done=0)
    clock = Clock()
    watch = HangWatch(str(tmp_path), 10, clock=clock)
    for _ in range(5):
        assert not watch({process.pid})
        clock.now += 100
    assert "most recent call first" not in rundir.rank_log(tmp_path, 3).read_text()
    wait_until(lambda: process.poll() is None, 1, "the rank to be alive")


def test_heartbeats_of_other_hosts_or_processes_are_not_ours(tmp_path, stuck_rank):
    process = stuck_rank(done=1)
    watch = HangWatch(str(tmp_path), 10, host="another-node")
    assert watch.ours({process.pid}) == {}
    assert HangWatch(str(tmp_path), 10).ours({process.pid + 1}) == {}  # not one of our live processes
    assert list(HangWatch(str(tmp_path), 10).ours({process.pid})) == [3]
    assert Path(rundir.heartbeat_path(tmp_path, 3)).is_file()


def test_hang_timeout_default_scales_with_the_rendezvous_timeout(islab, clean_environment, monkeypatch):
    def shown(*options: str) -> str:
        code, out, err = islab("--device", "cpu", "--nproc", "2", "--dry-run", *options)
        assert code == 0, err
        return re.search(r"hang_timeout_s\s+= (.*)", out).group(1)

    assert shown() == "1800  (source: default, chosen by the planner)"  # max(2 x torchrun static 900, 600)
    assert shown("--rdzv-timeout", "400").startswith("800  ")
    assert shown("--hang-timeout", "30").startswith("30  (source: cli")
    monkeypatch.setenv("ISLAB_HANG_TIMEOUT", "0")
    assert shown().startswith("0  (source: env, ISLAB_HANG_TIMEOUT")
    monkeypatch.delenv("ISLAB_HANG_TIMEOUT")
    # an entry point is watched through its TensorBoard events (tests/run/test_event_hangs.py)
    code, out, err = islab("--device", "cpu", "--script", "train.py", "--hang-timeout", "30", "--dry-run")
    assert code == 0 and re.search(r"hang_timeout_s\s+= 30 ", out), err
