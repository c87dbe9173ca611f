"""The console while training: progress.jsonl, live/plain progress, rank filtering, summary, curves."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType

import pytest

from islab import rundir
from islab.plan.launch_plan import LaunchPlan, NodePlan
from islab.run import console as display
from islab.run import curves, formatting, supervise
from islab.rundir import latest_checkpoint

PY = sys.executable


def record(iteration: int, total: int = 20, **extra) -> dict:
    return {"iteration": iteration, "max_iterations": total, "env_steps": iteration * 16384,
            "steps_per_s": 30000.0 + iteration, "mean_return": 10.0 * iteration, "time_s": 0.5 * iteration,
            **extra}  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Pure parts
# ----------------------------------------------------------------------------------------------


def test_progress_reader_waits_for_whole_lines(tmp_path):
    path = tmp_path / "progress.jsonl"
    reader = rundir.ProgressReader(path)
    assert reader.poll() == []  # no file yet
    line = json.dumps(record(1))
    path.write_text(line[:10])
    assert reader.poll() == []
    with path.open("a") as handle:
        handle.write(line[10:] + "\nnot json\n" + json.dumps(record(2)) + "\n" + json.dumps(record(3))[:5])
    assert [item["iteration"] for item in reader.poll()] == [1, 2]
    assert rundir.read_progress(path)[-1]["iteration"] == 2


def test_plain_line_and_eta():
    line = formatting.plain_line(record(5))
    assert line == ("islab-train: iteration 5/20 (25%) | 30.0k env steps/s | mean return 50.00 | "
                    "elapsed 2s | ETA 8s")  # fmt: skip
    assert formatting.eta_s(record(5)) == pytest.approx(15 * 16384 / 30005)  # 15 iterations at the latest pace
    assert formatting.eta_s({"iteration": 0, "max_iterations": 5, "time_s": 0}) is None
    assert formatting.eta_s({"iteration": 2, "max_iterations": 4, "time_s": 3.0}) == pytest.approx(3.0)  # no rate
    # a first iteration that took 100 s of warm-up, then 1 s each: the ETA is the pace now, not the average
    warmed_up = {"iteration": 2, "max_iterations": 10, "env_steps": 2000, "steps_per_s": 1000.0, "time_s": 101.0}
    assert formatting.eta_s(warmed_up) == pytest.approx(8.0)
    assert "mean return -" in formatting.plain_line(record(1, mean_return=None))
    assert formatting.format_duration(3725) == "1h02m05s"
    assert formatting.format_rate(2_500_000) == "2.50M"


def test_route_line_and_policy():
    assert display.route_line("[default1]:hello\n", first_rank=4) == (5, "hello\n")
    assert display.route_line("torchrun says\n", first_rank=4) == (None, "torchrun says\n")
    quiet, everything = display.ConsolePolicy(), display.ConsolePolicy(all_ranks=True)
    assert quiet.shows(None, "out") and quiet.shows(0, "err")
    assert not quiet.shows(0, "out") and not quiet.shows(1, "err")
    assert everything.shows(1, "out")


def test_a_ranks_traceback_is_condensed_to_its_exception_and_log():
    """Issue 23 item 13: a traceback reaches the console as one line, its exception and the rank's log
    (which keeps it whole); the rank's other lines pass as they are."""
    condenser = display.TracebackCondenser("/r")
    plain = ["step 1", "Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "    f()",
             "    ^^^", "", "KeyError: 'x'", "", "During handling of the above exception, another exception occurred:",
             "", "Traceback (most recent call last):", '  File "b.py", line 2', "RuntimeError: yes", "  indented",
             "step 2"]  # fmt: skip
    assert [condenser.condense(0, line) for line in plain] == [
        "step 1", None, None, None, None, None, "KeyError: 'x' (traceback in /r/logs/rank_0.log)", None, None, None,
        None, None, "RuntimeError: yes (traceback in /r/logs/rank_0.log)", None, "step 2",
    ]  # fmt: skip
    # torch's excepthook prefixes every line of the block, the message's further lines included
    hooked = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "w.py", line 9', "[rank1]: ValueError: a",
              "[rank1]: second line of the message", "", "after it"]  # fmt: skip
    assert [condenser.condense(1, line) for line in hooked] == [
        None,
        None,
        "ValueError: a (traceback in /r/logs/rank_1.log)",
        None,
        None,
        "after it",
    ]
    assert (
        condenser.condense(0, "  an indented line outside a traceback\n") == "  an indented line outside a traceback\n"
    )


def test_summary_rows_and_resume_hint():
    summary = {"iterations": 20, "env_steps": 327680, "wall_s": 11.0, "mean_return": 108.7, "checkpoint": "/r/m.pt",
               "world_size": 2, "env_steps_per_s": 29789.1}  # fmt: skip
    resume = display.resume_command("/r")
    assert resume == "islab-train --resume /r"  # the run directory alone: no options repeated
    rows = dict(formatting.summary_rows(summary, "/r", resume))
    assert rows["wall time"] == "11s" and rows["env steps (all ranks)"] == "327,680"
    assert rows["env steps/s"] == "29.8k" and rows["final mean return"] == "108.70"
    assert rows["checkpoint"] == "/r/m.pt" and rows["run directory"] == "/r" and "resume" in rows


def test_curves_png(tmp_path):
    path = curves.write_curves([record(i) for i in range(1, 6)], tmp_path / "curves.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert curves.write_curves([], tmp_path / "none.png") is None


def test_plain_view_prints_at_most_once_per_interval(tmp_path):
    out = io.StringIO()
    view = display.RunView(str(tmp_path), out, live=False, interval_s=3600)
    progress = tmp_path / "progress.jsonl"
    progress.write_text(json.dumps(record(1)) + "\n")
    view.tick()
    progress.write_text(progress.read_text() + json.dumps(record(2)) + "\n")
    view.tick()  # within the interval: nothing new printed
    view.close()  # the final state is always printed
    view.close()  # once
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["islab-train: iteration 1/20 (5%)",
                                                        "islab-train: iteration 2/20 (10%)"]  # fmt: skip


def test_live_view_draws_the_display(tmp_path):
    out = io.StringIO()
    view = display.RunView(str(tmp_path), out, live=True, note="rsl_rl")
    (tmp_path / "progress.jsonl").write_text(json.dumps(record(7)) + "\n")
    view.emit("[rank 0] a warning\n", out)
    view.tick()
    view.close()
    raw = out.getvalue()
    assert "\x1b[" in raw  # terminal control codes: a live display, not plain lines
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    for fragment in ("iteration 7/20", "env steps/s", "30.0k", "mean return", "70.00", "ETA", "a warning"):
        assert fragment in text, fragment


# ----------------------------------------------------------------------------------------------
# Through the supervisor: a stand-in torchrun that talks like the real one
# ----------------------------------------------------------------------------------------------

FAKE_TORCHRUN = """
import json, os, sys, time
args = sys.argv[1:]
assert args[:2] == ["--tee", "3"], args  # the supervisor asks torchrun to label rank lines
run_dir = args[args.index("--run-dir") + 1]
fail = "--fail" in args
exit_code = args[args.index("--rank1-exits") + 1] if "--rank1-exits" in args else None  # no traceback: a code
os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
print("torchrun banner", file=sys.stderr, flush=True)
for rank in (0, 1):
    with open(os.path.join(run_dir, "logs", f"rank_{rank}.log"), "w") as log:
        crash = "Traceback (most recent call last):\\nValueError: boom\\n" if fail and rank == 1 else ""
        crash += "rank 1 gave up: no such file\\n" if exit_code and rank == 1 else ""
        log.write(f"rank {rank} log line\\n" + crash)
for i in range(1, 4):
    print(f"[default0]:rank0 stdout {i}", flush=True)
    print(f"[default1]:rank1 stdout {i}", flush=True)
    with open(os.path.join(run_dir, "progress.jsonl"), "a") as p:
        p.write(json.dumps({"iteration": i, "max_iterations": 3, "env_steps": i * 100, "steps_per_s": 1000.0,
                            "mean_return": float(i), "time_s": 0.1 * i}) + "\\n")
    time.sleep(0.1)
print("[default0]:rank0 warning on stderr", file=sys.stderr, flush=True)
print("[default1]:rank1 warning on stderr", file=sys.stderr, flush=True)
if fail:
    sys.exit(1)
if exit_code:  # torchrun's failure summary, as it prints one for a rank that left no error file
    print(f"ChildFailedError:\\nRoot Cause (first observed failure):\\n[0]:\\n  rank      : 1 (local_rank: 1)\\n"
          f"  exitcode  : {exit_code} (pid: 7)", file=sys.stderr, flush=True)
    sys.exit(1)
json.dump({"iterations": 3, "env_steps": 300, "wall_s": 0.3, "mean_return": 3.0, "checkpoint": "ck.pt",
           "world_size": 2, "env_steps_per_s": 1000.0}, open(os.path.join(run_dir, "summary.json"), "w"))
"""


def fake_plan(tmp_path: Path, *extra: str) -> LaunchPlan:
    script = tmp_path / "fake_torchrun.py"
    script.write_text(textwrap.dedent(FAKE_TORCHRUN))
    run_dir = str(tmp_path / "run")
    # "-m torch.distributed.run" is what the supervisor recognises; the stand-in takes its place
    sitecustom = tmp_path / "shim"
    (sitecustom / "torch" / "distributed").mkdir(parents=True)
    (sitecustom / "torch" / "__init__.py").write_text("")
    (sitecustom / "torch" / "distributed" / "__init__.py").write_text("")
    (sitecustom / "torch" / "distributed" / "run.py").write_text(f"exec(open({str(script)!r}).read())\n")
    argv = (PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--run-dir", run_dir, *extra)
    node = NodePlan(0, argv, MappingProxyType({"PYTHONPATH": str(sitecustom)}))
    return LaunchPlan("torchrun", run_dir, (node,))


def run(plan: LaunchPlan, **options) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    console = supervise.ConsoleOptions(progress=True, interval_s=0.0, **options)
    code = supervise.run_plan(plan, 0, stdout=out, stderr=err, console=console)
    return code, out.getvalue(), err.getvalue()


def test_default_console_shows_progress_and_rank0_errors_only(tmp_path):
    plan = fake_plan(tmp_path)
    code, out, err = run(plan, all_ranks=False)
    assert code == 0, err
    assert "torchrun banner" in err
    assert "[rank 0] rank0 warning on stderr" in err
    assert "rank1" not in out + err and "rank0 stdout" not in out + err
    assert "islab-train: iteration 3/3 (100%)" in out
    assert "run finished" in out and "ck.pt" in out
    assert f"\n  islab-train --resume {os.path.abspath(plan.run_dir)}\n" in out  # no options repeated
    assert Path(plan.run_dir, "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_all_ranks_prefixes_every_line(tmp_path):
    code, out, err = run(fake_plan(tmp_path), all_ranks=True)
    assert code == 0
    assert "[rank 1] rank1 stdout 2" in out and "[rank 0] rank0 stdout 1" in out
    assert "[rank 1] rank1 warning on stderr" in err


def test_failure_names_the_rank_its_exception_and_log(tmp_path):
    plan = fake_plan(tmp_path, "--fail")
    code, out, err = run(plan, all_ranks=False)
    assert code == 1
    assert "rank 1 failed with ValueError: boom" in err
    assert "last lines of" not in err and "rank 1 log line" not in err  # the cause is named: no tail
    assert "run finished" not in out  # no summary for a failed run
    assert "no checkpoint was written yet" in err
    latest_checkpoint(plan.run_dir).parent.mkdir(parents=True, exist_ok=True)
    latest_checkpoint(plan.run_dir).write_bytes(b"ck")
    code, out, err = run(plan, all_ranks=False)  # with a checkpoint, the failure says how to go on
    assert code == 1 and f"to resume this run:\n  islab-train --resume {os.path.abspath(plan.run_dir)}\n" in err
    assert err.rstrip().splitlines()[-1].startswith("error: ") and "rank 1" in err.splitlines()[-1], err  # still last


@pytest.mark.parametrize(("exit_code", "tail"), [("1", True), ("-9", False)])
def test_failures_tail_only_when_nothing_else_names_the_cause(tmp_path, exit_code, tail):
    """A rank that exited with a code and no traceback: its log's last lines are the one clue, printed
    above the error line; killed by a signal, the error line says so and no tail is printed."""
    code, _, err = run(fake_plan(tmp_path, "--rank1-exits", exit_code), all_ranks=False)
    assert code == 1
    assert ("rank 1 gave up: no such file" in err) is tail and ("last lines of" in err) is tail, err
    assert err.rstrip().splitlines()[-1].startswith("error: training failed on node 0"), err
    assert ("SIGKILL" in err.splitlines()[-1]) is not tail, err


def test_curves_keep_the_last_record_of_a_redone_iteration(tmp_path, monkeypatch):
    import matplotlib.axes

    plotted = []
    original_plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda self, x, y, **kw: plotted.append((list(x), list(y))) or original_plot(self, x, y, **kw),
    )
    records = [{"iteration": i, "mean_return": float(i), "steps_per_s": 1.0} for i in (1, 2, 3)] + [
        {"iteration": i, "mean_return": 10.0 * i, "steps_per_s": 2.0} for i in (3, 4)
    ]  # restart after 2
    from islab.run.curves import write_curves

    assert write_curves(records, tmp_path / "curves.png").is_file()
    assert plotted[0] == ([1, 2, 3, 4], [1.0, 2.0, 30.0, 40.0])


def test_curves_mark_each_resume(tmp_path, monkeypatch):
    import matplotlib.axes

    marks = []
    original = matplotlib.axes.Axes.axvline
    monkeypatch.setattr(
        matplotlib.axes.Axes, "axvline", lambda self, x, **kw: marks.append(x) or original(self, x, **kw)
    )
    # each process reports time_s from its own start: 3 iterations, then a resume at 4, another at 6
    records = [{"iteration": i, "mean_return": 1.0, "time_s": t} for i, t in
               [(1, 1.0), (2, 2.0), (3, 3.0), (4, 0.5), (5, 1.5), (6, 0.4)]]  # fmt: skip
    assert curves.resume_points(records) == [4, 6]
    assert curves.write_curves(records, tmp_path / "curves.png").is_file()
    assert sorted(set(marks)) == [3.5, 5.5] and len(marks) == 4  # on both plots


def test_summary_shows_the_checkpoint_resume_uses():
    """The table names summary.json's ``checkpoint`` (the islab one), never the library's file."""
    from islab.run.formatting import summary_rows

    summary = {"checkpoint": "/r/checkpoints/latest.pt", "library_checkpoint": "/r/model_11.pt"}
    rows = dict(summary_rows(summary, "/r", "islab-train --resume /r"))
    assert rows["checkpoint"] == "/r/checkpoints/latest.pt"
    rows = dict(summary_rows({"library_checkpoint": "/r/model_11.pt"}, "/r", None))
    assert rows["checkpoint"] == "-"


def test_rank_info_records_and_colour_codes_stay_off_plain_consoles(tmp_path):
    """skrl's coloured "[skrl:INFO]" lines from rank 0 (issue 14 item 12): hidden by default, and
    plain (non-TTY) output carries no escape codes even with --all-ranks."""
    import io

    from islab.run.console import ConsolePolicy, RunView

    quiet = ConsolePolicy()
    info = "\x1b[38;20m[skrl:INFO] Seeding: 42\x1b[0m\n"
    assert not quiet.shows(0, "err", info)
    assert not quiet.shows(0, "err", "INFO:root:started\n")
    assert quiet.shows(0, "err", "\x1b[33m[skrl:WARNING] low reward\x1b[0m\n")
    assert quiet.shows(0, "err", "Traceback (most recent call last):\n")
    sink = io.StringIO()
    view = RunView(str(tmp_path), sink, live=False, interval_s=3600)
    view.emit("[rank 0] " + info, sink)  # what --all-ranks shows
    assert sink.getvalue() == "[rank 0] [skrl:INFO] Seeding: 42\n"


def test_a_script_without_readable_progress_finishes_as_a_success(tmp_path):
    """No summary.json and no TensorBoard scalars (a user's script): the end says it finished and
    where its run directory is, in words that do not read like a failure."""
    out = io.StringIO()
    display.finish(str(tmp_path), out, tty=False, resume=None, records=[])
    text = out.getvalue()
    assert "finished (every rank exited 0)" in text and str(tmp_path) in text
    assert "no summary.json" not in text and "error" not in text.lower()


def test_a_summary_written_without_a_terminal_keeps_every_path_whole():
    """Issue 30 item 9: without a terminal the summary table was 120 columns wide, so a long run
    directory folded onto the next line of a CI log. It is as wide as its values; on a terminal it
    still fits the terminal."""
    run_dir = "/scratch/" + "/".join(["a-rather-long-folder-name"] * 6) + "/rsl_rl/Task/2026-01-01_12-00-00"
    out = io.StringIO()
    display.render_summary([("iterations", "2"), ("run directory", run_dir)], out, tty=False)
    (line,) = [line for line in out.getvalue().splitlines() if "run directory" in line]
    assert run_dir in line, out.getvalue()
