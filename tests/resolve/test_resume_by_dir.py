"""`islab-train --resume RUN_DIR` alone: the run's stored spec (launch.yaml) is a layer below
everything given now; the fields a checkpoint is shaped by cannot change (exit 2, one line).
Through the real command line, in-process, dry runs only (the launch itself is in test_e2e_training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from islab.resolve.resolve import Provided, resolve_spec
from islab.rundir import latest_checkpoint, write_launch_record

pytestmark = pytest.mark.usefixtures("clean_environment")

STORED = {
    "lib": "rl_games", "device": "cpu", "nproc_per_node": 2, "num_envs": 64, "seed": 7,
    "max_iterations": 4, "overrides": ("params.config.minibatch_size=128",),
}  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory as a launch leaves it: launch.yaml (spec + sources) and a checkpoint."""
    resolved = resolve_spec({name: Provided(value, f"--{name}") for name, value in STORED.items()})
    directory = tmp_path / "logs" / "rl_games" / "Islab-Cartpole-v0" / "2026-01-01_00-00-00"
    sources = {name: source.value for name, _, source in resolved.explain()}
    write_launch_record(directory, {"spec": resolved.spec.to_plain(), "sources": sources})
    latest_checkpoint(directory).parent.mkdir(parents=True)
    latest_checkpoint(directory).write_bytes(b"checkpoint")
    return directory


def worker_argv(islab, *args: str) -> list[str]:
    code, out, err = islab(*args, "--dry-run", "--json")
    assert code == 0, err
    (node,) = json.loads(out)["nodes"]
    return node["argv"]


def value_after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_run_directory_alone_continues_with_its_stored_spec(islab, run_dir: Path) -> None:
    argv = worker_argv(islab, "--resume", str(run_dir))
    assert value_after(argv, "--lib") == "rl_games" and value_after(argv, "--num-envs") == "64"
    assert value_after(argv, "--seed") == "7" and "--max-iterations" not in argv  # resuming finishes its target
    assert value_after(argv, "--device") == "cpu" and value_after(argv, "--nproc_per_node") == "2"
    assert argv[-1] == "params.config.minibatch_size=128"
    assert value_after(argv, "--run-dir") == str(run_dir)  # training goes on in the same directory


def test_options_given_now_override_the_stored_spec(islab, run_dir: Path, monkeypatch) -> None:
    argv = worker_argv(islab, "--resume", str(run_dir), "--max-iterations", "9", "--seed", "3")
    assert value_after(argv, "--max-iterations") == "9" and value_after(argv, "--seed") == "3"
    monkeypatch.setenv("ISLAB_CHECKPOINT_INTERVAL", "5")
    assert value_after(worker_argv(islab, "--resume", str(run_dir)), "--checkpoint-interval") == "5"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--lib", "rsl_rl"), "lib (--lib)"),
        (("--num-envs", "128"), "num_envs (--num-envs)"),
        (("--task", "Islab-Quadcopter-v0"), "task (--task)"),
    ],
)
def test_a_resume_cannot_change_what_the_checkpoint_is_shaped_by(islab, run_dir: Path, args, field) -> None:
    code, out, err = islab("--resume", str(run_dir), *args, "--dry-run")
    assert code == 2 and out == "", (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: the run being resumed"), err
    assert "Start a new run without --resume" in lines[0] or "start a new run without --resume" in lines[0]


def test_an_islab_variable_cannot_change_them_either(islab, run_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("ISLAB_NUM_ENVS", "32")
    code, _, err = islab("--resume", str(run_dir), "--dry-run")
    assert code == 2 and err.startswith("error: num_envs (ISLAB_NUM_ENVS): the run being resumed"), err


def test_a_checkpoint_file_of_the_run_brings_the_stored_spec_too(islab, run_dir: Path) -> None:
    argv = worker_argv(islab, "--resume", str(latest_checkpoint(run_dir)))
    assert value_after(argv, "--lib") == "rl_games" and value_after(argv, "--num-envs") == "64"


def test_resume_alone_passes_no_length_so_the_run_finishes_its_target(islab, run_dir: Path) -> None:
    """Issue 23 item 14: --resume alone finishes the run's original target (the worker reads it from
    the checkpoint); --max-iterations / --total-env-steps given with it say how many more."""
    assert "--max-iterations" not in worker_argv(islab, "--resume", str(run_dir))
    code, out, err = islab("--resume", str(run_dir), "--dry-run")
    assert code == 0 and "resuming finishes the run's original target" in out, err
    assert value_after(worker_argv(islab, "--resume", str(run_dir), "--max-iterations", "9"), "--max-iterations") == "9"
    more = worker_argv(islab, "--resume", str(run_dir), "--total-env-steps", "5000")
    assert value_after(more, "--total-env-steps") == "5000" and "--max-iterations" not in more


def test_a_resumed_runs_old_progress_is_not_shown_as_its_first_progress_line(tmp_path: Path) -> None:
    import io

    from islab.run.console import RunView
    from islab.rundir import progress_path

    def record(iteration: int, target: int) -> str:
        return json.dumps({"iteration": iteration, "max_iterations": target, "env_steps": 1, "steps_per_s": 1.0,
                           "mean_return": 0.5, "time_s": 1.0}) + "\n"  # fmt: skip

    progress_path(tmp_path).write_text(record(1, 2) + record(2, 2))  # the run before the resume
    out = io.StringIO()
    view = RunView(str(tmp_path), out, live=False, interval_s=0)
    view.tick()
    assert out.getvalue() == ""  # not "iteration 2/2 (100%)" of the earlier launch
    with progress_path(tmp_path).open("a") as handle:
        handle.write(record(3, 5))
    view.tick()
    assert out.getvalue().startswith("islab-train: iteration 3/5")
    assert [record["iteration"] for record in view.records] == [1, 2, 3]  # the curves keep the history
