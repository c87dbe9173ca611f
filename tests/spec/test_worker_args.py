"""islab.spec.worker_args: one table of the worker's arguments, read by the planner and the worker.

* The planner's argv is the one the hand-written bridge (kept below, frozen, as it was before the
  table) wrote, for many specs: the dry run of every existing command line stays the same.
* What the planner writes, the worker's parser reads back to the spec's values.
* Every default a rank can fall back on is the table's: the worker's parser, the spec's schema,
  the checkpointer and ``islab play``'s seed fallback.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from child_env import child_env

from islab.plan.plan import rendezvous_timeout_of, worker_args
from islab.spec.run_spec import RunSpec
from islab.spec.worker_args import WORKER_ARGS, Emit, build_parser, default_of, parse, to_argv, values_from

RUN_DIR = "logs/rsl_rl/Islab-Cartpole-v0/2026-03-04_05-06-07"


def legacy_worker_args(spec: RunSpec, run_dir: str) -> list[str]:
    """plan.worker_args as written by hand before the table (commit 1e99226), for comparison."""
    return [
        "--lib", spec.lib,
        "--ml-framework", spec.ml_framework,
        "--task", spec.task,
        *(["--task-module", spec.task_module] if spec.task_module is not None else []),
        "--num-envs", str(spec.num_envs),
        "--seed", str(spec.seed),
        *(["--total-env-steps", str(spec.total_env_steps)] if spec.total_env_steps is not None
          else ["--max-iterations", str(spec.max_iterations)]),
        "--device", spec.device,
        "--run-dir", run_dir,
        "--distributed",
        "--checkpoint-interval", str(spec.checkpoint_interval),
        *(["--logger", spec.logger] if spec.logger != "tensorboard" else []),
        # the launcher's own rendezvous timeout when none is set (issue 23 item 10)
        "--peer-timeout", str(rendezvous_timeout_of(spec)),
        *(["--resume", spec.resume] if spec.resume is not None else []),
        *spec.overrides,
    ]  # fmt: skip


LIBS = (("rsl_rl", "torch"), ("rl_games", "torch"), ("skrl", "torch"), ("skrl", "jax"))
VARIANTS = (
    {},
    {"seed": 0, "num_envs": 7, "checkpoint_interval": 0},
    {"total_env_steps": 123456, "logger": "wandb"},
    {"max_iterations": 3, "logger": "tensorboard", "device": "cpu", "nproc_per_node": 2},
    {"task_module": "my_tasks.reach", "resume": "logs/run a/checkpoints/iter_5.pt", "seed": 2**31},
    {"overrides": ("algorithm.learning_rate=0.001", "+extra.key=a b"), "rendezvous": {"timeout_s": 77}},
    {"task": "Islab-Quadcopter-v0", "total_env_steps": 1, "resume": "/runs/x", "checkpoint_interval": 10},
    {"device": "cpu", "rendezvous": {"timeout_s": 1}, "logger": "wandb", "overrides": ("a=1",), "seed": 42},
)


# Options added to the table after the hand-written bridge: it cannot write them.
NEWER = (
    {"keep_checkpoints": 0}, {"keep_checkpoints": 7, "total_env_steps": 9, "logger": "wandb"}, {"video_interval": 5},
)  # fmt: skip


def specs(variants: tuple[dict, ...] = VARIANTS) -> list[RunSpec]:
    return [
        RunSpec.model_validate({"lib": lib, "ml_framework": framework, "python": "/py", **variant})
        for (lib, framework), variant in itertools.product(LIBS, variants)
    ]


@pytest.mark.parametrize("spec", specs(), ids=lambda spec: f"{spec.lib}-{spec.ml_framework}")
def test_the_planner_writes_the_same_argv_as_the_hand_written_bridge(spec):
    assert worker_args(spec, RUN_DIR) == legacy_worker_args(spec, RUN_DIR)


@pytest.mark.parametrize("spec", specs((*VARIANTS, *NEWER)), ids=lambda spec: f"{spec.lib}-{spec.ml_framework}")
def test_the_worker_reads_back_what_the_planner_wrote(spec, monkeypatch):
    from islab.worker import __main__ as worker

    monkeypatch.setattr(worker, "add_task_module", lambda module: None)  # my_tasks.reach is not on the path
    args = worker.parse_args(worker_args(spec, RUN_DIR))
    expected = {
        "lib": spec.lib, "ml_framework": spec.ml_framework, "task": spec.task, "task_module": spec.task_module,
        "num_envs": spec.num_envs, "seed": spec.seed, "device": spec.device, "run_dir": Path(RUN_DIR),
        "distributed": True, "checkpoint_interval": spec.checkpoint_interval, "logger": spec.logger,
        "peer_timeout": float(rendezvous_timeout_of(spec)), "overrides": list(spec.overrides),
        "resume": Path(spec.resume) if spec.resume is not None else None,
        "total_env_steps": spec.total_env_steps, "keep_checkpoints": spec.keep_checkpoints,
        "video_interval": spec.video_interval,
        "max_iterations": spec.max_iterations if spec.total_env_steps is None else None,
        "scheduler_job": None, "job_restart": None,  # no scheduler job (tests/plan/test_plan.py has one)
    }  # fmt: skip
    assert vars(args) == expected


def test_every_spec_field_the_planner_reads_exists():
    plain = RunSpec().model_dump()
    for arg in WORKER_ARGS:
        if arg.field is not None:
            section, _, key = arg.field.rpartition(".")
            assert key in (plain[section] if section else plain), arg.flag


BASE = ["--lib", "rsl_rl", "--task", "Islab-Cartpole-v0", "--num-envs", "2", "--run-dir", "r"]
MINIMAL = [*BASE, "--max-iterations", "1"]


def test_the_worker_falls_back_on_the_tables_defaults():
    args = parse(build_parser(), MINIMAL)
    for arg in WORKER_ARGS:
        if not arg.required:
            assert getattr(args, arg.name) == (list(arg.default) if arg.positional else arg.default), arg.flag
    assert args.seed == 42 and args.checkpoint_interval == 10 and args.peer_timeout == 600.0


def test_the_spec_and_the_other_readers_use_the_tables_defaults():
    from islab.worker.checkpoint import DEFAULT_INTERVAL

    spec = RunSpec()
    for arg in WORKER_ARGS:
        if arg.field is not None and "." not in arg.field and arg.default is not None:
            assert getattr(spec, arg.field) == arg.default, arg.field
    assert default_of("checkpoint_interval") == DEFAULT_INTERVAL


def test_an_argument_at_its_default_is_left_out_when_the_table_says_so():
    values = values_from(
        RunSpec(python="/py").model_dump(),
        run_dir="r",
        distributed=True,
        peer_timeout=600,
        scheduler_job=None,
        job_restart=None,
    )
    quiet = [arg for arg in WORKER_ARGS if arg.emit is Emit.NOT_DEFAULT]
    assert quiet, "the table has no argument written only when it differs from its default"
    for arg in quiet:
        assert arg.flag not in to_argv(values)
        changed = next(choice for choice in arg.choices) if arg.choices else arg.default + 1
        changed = changed if changed != arg.default else arg.choices[-1]  # type: ignore[index]
        argv = to_argv({**values, arg.name: changed})
        assert argv[argv.index(arg.flag) + 1] == str(changed)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-iterations", "0"], "--max-iterations must be >= 1"),
        (["--total-env-steps", "0"], "--total-env-steps must be >= 1"),
        (["--max-iterations", "1", "--checkpoint-interval", "-1"], "--checkpoint-interval must be >= 0"),
        (["--max-iterations", "1", "--total-env-steps", "5"], "not allowed with argument"),
        ([], "one of --total-env-steps or --max-iterations is required"),
    ],
)
def test_the_worker_refuses_what_the_table_forbids(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(build_parser(), [*BASE, *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_keep_checkpoints_reaches_the_checkpointer(tmp_path):
    """The option added as one row: a rank told --keep-checkpoints 1 keeps one iter_<N>.pt (the
    default, 3, would leave three of the four)."""
    import subprocess
    import sys

    env = child_env(("ISLAB_", "RANK", "WORLD_SIZE", "TORCHELASTIC"))
    command = [sys.executable, "-m", "islab.worker", *BASE[:-1], str(tmp_path), "--device", "cpu",
               "--max-iterations", "4", "--checkpoint-interval", "1", "--keep-checkpoints", "1"]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**env, "ISLAB_THREADS_PER_RANK": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(path.name for path in (tmp_path / "checkpoints").glob("*.pt")) == ["iter_4.pt", "latest.pt"]


@pytest.mark.parametrize(
    ("kind", "default", "value"), [(bool, False, True), (int, 0, 3), (float, 0.5, 2.5), (str, "a", "b")]
)
def test_a_rows_own_spec_field_has_the_rows_kind(kind, default, value):
    """A row with ``cli`` becomes a spec field of its kind: a switch takes true/false, not text."""
    from pydantic import ValidationError, create_model

    from islab.spec.fields import _worker_option_field
    from islab.spec.worker_args import Cli, WorkerArg

    row = WorkerArg("--x", "x", kind, default=default, field="x", cli=Cli("x"))
    model = create_model("Model", x=_worker_option_field(row))
    assert model().x == default and model(x=value).x == value
    with pytest.raises(ValidationError):
        model(x=[value])
