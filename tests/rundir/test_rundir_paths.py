"""The run directory's layout and what a path a user gives means live in islab.rundir alone:
``--resume RUN_DIR | FILE``, play/export's ``--checkpoint latest | best | PATH``, the kept
``iter_<N>.pt`` history. Each interpretation on a real directory, and a scan that no other module
of src/ spells a run-directory path."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from paths import SRC

from islab import rundir

SRC = SRC / "islab"

# Text naming a file or folder of the run directory (islab.rundir's docstring lists them).
RUN_DIR_PATH = re.compile(
    r"checkpoints/|latest\.pt|iter_<|iter_\{|launch\.yaml|spec\.yaml|agent\.yaml|progress\.jsonl|summary\.json|"
    r"heartbeats/|digests/|logs/rank"
)
RUN_DIR_NAMES = {"checkpoints", "latest.pt", "iter_", "launch.yaml", "progress.jsonl", "heartbeats", "digests"}
# Strings that look like it but are another layout: the libraries' own files in their own folders,
# the worker's option help (defined with the worker's arguments).
ALLOWED = {
    ("libs/skrl_torch.py", "checkpoints"),  # skrl's own <experiment_dir>/checkpoints/agent_<t>.pt
    ("libs/_skrl_common.py", "checkpoints"),  # the final skrl checkpoint, in skrl's own folder
    ("worker/__main__.py", "continue a run: its directory (checkpoints/latest.pt)"),
}


def make_run(root: Path, iterations: dict[int, float | None]) -> Path:
    run = root / "logs" / "rsl_rl" / "Islab-Cartpole-v0" / "2026-01-01_00-00-00"
    rundir.write_launch_record(run, {"spec": {}, "sources": {}})
    for iteration, mean_return in iterations.items():
        rundir.history_checkpoint(run, iteration).parent.mkdir(parents=True, exist_ok=True)
        rundir.history_checkpoint(run, iteration).write_bytes(b"x")
        with rundir.progress_path(run).open("a") as progress:
            progress.write(json.dumps({"iteration": iteration, "mean_return": mean_return}) + "\n")
    rundir.latest_checkpoint(run).parent.mkdir(parents=True, exist_ok=True)
    rundir.latest_checkpoint(run).write_bytes(b"x")
    return run


def test_resume_reads_a_run_directorys_latest_or_the_file_given(tmp_path: Path) -> None:
    run = make_run(tmp_path, {10: 1.0})
    assert rundir.resume_source(run) == run / "checkpoints" / "latest.pt"
    assert rundir.resume_source(run / "checkpoints" / "iter_10.pt") == run / "checkpoints" / "iter_10.pt"
    assert rundir.continued_run_dir(str(run)) == str(run)  # training goes on in the directory given
    assert rundir.continued_run_dir(str(run / "checkpoints" / "iter_10.pt")) is None  # a new one for a file
    assert rundir.continued_run_dir(None) is None


def test_the_run_behind_a_resume_value_is_the_one_with_a_launch_record(tmp_path: Path) -> None:
    run = make_run(tmp_path, {})
    assert rundir.run_dir_of(str(run)) == run
    assert rundir.run_dir_of(str(run / "checkpoints" / "latest.pt")) == run
    assert rundir.run_dir_of(str(tmp_path / "elsewhere.pt")) is None


def test_latest_best_and_a_path_name_a_checkpoint_of_the_run(tmp_path: Path) -> None:
    run = make_run(tmp_path, {9: 5.0, 10: 3.0, 11: None})
    assert rundir.chosen_checkpoint(run, "latest") == (run / "checkpoints" / "latest.pt", "latest", None)
    path, choice, note = rundir.chosen_checkpoint(run, "best")
    assert (path.name, choice, note) == ("iter_9.pt", "best", "iteration 9, mean return 5.00 during training")
    assert rundir.chosen_checkpoint(run, "/x/iter_3.pt") == (Path("/x/iter_3.pt"), "path", None)
    bare = make_run(tmp_path / "bare", {})
    assert rundir.chosen_checkpoint(bare, "best")[0] == rundir.latest_checkpoint(bare)  # falls back, says so


def test_the_history_is_ordered_by_iteration_not_by_name(tmp_path: Path) -> None:
    run = make_run(tmp_path, {9: 1.0, 10: 1.0, 100: 1.0})
    (run / "checkpoints" / "iter_x.pt").write_bytes(b"not a history file")
    assert list(rundir.history_checkpoints(run)) == [9, 10, 100]


def test_no_other_module_spells_a_run_directory_path() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "rundir":  # the run directory's own package
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        where = path.relative_to(SRC).as_posix()
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
                continue
            text = node.value
            if (text in RUN_DIR_NAMES or RUN_DIR_PATH.search(text)) and not any(
                where == allowed_path and text.startswith(prefix) for allowed_path, prefix in ALLOWED
            ):
                found.append(f"{where}:{node.lineno}: {text[:80]!r}")
    assert not found, "use islab.rundir's names instead:\n" + "\n".join(found)


def test_a_run_reached_its_target_only_when_its_last_launch_ended_there(tmp_path):
    """``--resume RUN`` alone has nothing to train (issue 30 item 2) when summary.json is at
    spec.yaml's target and nothing was written after it; a preemption, a later checkpoint or a later
    launch's spec.yaml mean there is more to do."""
    import os

    run = tmp_path / "run"
    rundir.write_yaml(run / rundir.SPEC_FILE, {"target_iteration": 5})
    rundir.latest_checkpoint(run).parent.mkdir(parents=True)
    rundir.latest_checkpoint(run).write_bytes(b"")
    assert rundir.reached_target(run) is None  # no summary yet: it never ended
    rundir.write_summary(run, {"iteration": 5})
    for path in (rundir.latest_checkpoint(run), run / rundir.SPEC_FILE):
        os.utime(path, (1, 1))
    assert rundir.reached_target(run) == (5, 5)
    rundir.write_summary(run, {"iteration": 3})
    assert rundir.reached_target(run) is None  # ended below its target
    rundir.write_summary(run, {"iteration": 5, "preempted": {"signal": "SIGTERM", "iteration": 5}})
    assert rundir.reached_target(run) is None
    rundir.write_summary(run, {"iteration": 5})
    for later in (rundir.latest_checkpoint(run), run / rundir.SPEC_FILE):
        os.utime(later, (2e9, 2e9))  # written after the summary: a later launch
        assert rundir.reached_target(run) is None, later
        os.utime(later, (1, 1))
    assert rundir.reached_target(run) == (5, 5)
