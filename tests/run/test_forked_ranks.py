"""At launch, torchrun forks our worker's CPU ranks from its agent (islab.plan.torchrun, "Forked
ranks"): the command a node runs, read back with torchrun's own parser, and a real launch whose
ranks are the agent's forks. GPU ranks, a user's entry point and another interpreter keep one
interpreter per rank; the dry run shows the plan's command either way."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from child_env import child_env
from training_runs import ISLAB_TRAIN

from islab.plan.plan import build_plan
from islab.plan.torchrun import FORKED_RANKS, MODULE, QUICK_EXIT_MODULE
from islab.resolve.resolve import Provided, resolve_spec
from islab.run.torchrun_node import TorchrunNode
from islab.worker import ENTRY_SCRIPT


def node_command(**values: object) -> tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]:
    """(argv, env) torchrun is started with at launch, and the plan's (dry run's) argv."""
    layer = {name: Provided(value, f"--{name}") for name, value in values.items()}
    layer.setdefault("python", Provided(sys.executable, "--python"))
    plan = build_plan(resolve_spec(layer).spec, now=datetime(2026, 3, 4), free_port=45678)
    runner = TorchrunNode(plan, plan.node(0))
    try:
        (child,) = runner.children()
    finally:
        runner.close()
    return tuple(child.argv), dict(child.env), plan.node(0).argv


def torchrun_args(argv: tuple[str, ...]):
    from torch.distributed.run import get_args_parser

    return get_args_parser().parse_args(list(argv[argv.index(MODULE) + 1 :]))


def test_cpu_ranks_of_our_worker_are_forked_from_the_agent() -> None:
    argv, env, planned = node_command(device="cpu", nproc_per_node=2)
    # the agent imports the library's adapter once, before it forks the ranks
    assert argv[:7] == (sys.executable, "-m", QUICK_EXIT_MODULE, "--import", "islab.libs.rsl_rl", "-m", MODULE)
    args = torchrun_args(argv)
    assert args.run_path and args.start_method == "fork" and not args.module
    assert Path(args.training_script) == ENTRY_SCRIPT
    # the worker's arguments and torchrun's layout are the plan's
    assert args.training_script_args == list(planned[planned.index("islab.worker") + 1 :])
    planned_args = torchrun_args(planned)
    assert (args.nproc_per_node, args.master_port) == (planned_args.nproc_per_node, planned_args.master_port)
    assert env["PYTHONUNBUFFERED"] == "1"  # as torchrun's `python -u` ranks
    assert not set(FORKED_RANKS) & set(planned)  # the dry run shows the plan's command


@pytest.mark.parametrize(
    "values",
    [
        {"device": "cuda", "nproc_per_node": 2},  # GPU ranks: not yet run on a GPU
        {"device": "cpu", "nproc_per_node": 2, "python": "/opt/isaac/python.sh"},  # another interpreter
        {"device": "cpu", "nproc_per_node": 2, "entrypoint": {"script": "train.py"}},  # a user's entry point
    ],
    ids=["gpu", "other-python", "entry-point"],
)
def test_other_launches_start_each_rank_as_its_own_interpreter(values: dict[str, object]) -> None:
    layer = dict(values)
    python = layer.pop("python", sys.executable)
    argv, _, planned = node_command(python=python, **layer)
    assert QUICK_EXIT_MODULE not in argv and "--run-path" not in argv
    assert (
        argv[argv.index(MODULE) + 1 :][-len(planned[planned.index(MODULE) + 1 :]) :]
        == planned[planned.index(MODULE) + 1 :]
    )


@pytest.mark.slow
def test_a_real_cpu_launch_trains_on_ranks_forked_from_the_agent(tmp_path: Path) -> None:
    """The ranks' pids (from their heartbeats) are children of the torchrun agent, which runs under
    quick_exit, and started after it: forks, not interpreters of their own."""
    command = [*ISLAB_TRAIN, "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "64",
               "--max-iterations", "30", "--log-dir", str(tmp_path), "--run-name", "fork"]  # fmt: skip
    process = subprocess.Popen(command, env=child_env(("ISLAB_", "RANK", "WORLD_SIZE")), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        parents: dict[int, list[str]] = {}
        while process.poll() is None and len(parents) < 2:
            for beat in tmp_path.glob("*/*/*_fork/heartbeats/rank_*.json"):
                try:
                    pid = json.loads(beat.read_text())["pid"]
                    parents[pid] = psutil.Process(pid).parent().cmdline()
                except (OSError, ValueError, KeyError, psutil.Error):
                    continue
        assert len(parents) == 2, process.stderr.read() if process.poll() is not None else parents
        for agent in parents.values():
            assert agent[1:3] == ["-m", QUICK_EXIT_MODULE] and "--run-path" in agent, agent
            assert agent[agent.index(QUICK_EXIT_MODULE) + 1 :].index("-m") == 2, agent  # one --import
        assert process.wait(timeout=300) == 0, process.stderr.read()
        for rank in (0, 1):  # ... which the ranks found imported: no rank paid for rsl_rl's import
            (log,) = tmp_path.glob(f"*/*/*_fork/logs/rank_{rank}.log")
            assert "islab.libs.rsl_rl imported by torchrun's agent" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_agent_imports_what_it_is_told_before_the_module_runs(tmp_path: Path) -> None:
    """quick_exit's ``--import``: imported before ``-m MODULE`` runs; a module that fails to import is
    left to the ranks (they import it again and report it), not a failure of the agent."""
    (tmp_path / "preloaded_mod.py").write_text("")
    (tmp_path / "check_mod.py").write_text("import sys\nprint('preloaded_mod' in sys.modules)\n")
    command = [sys.executable, "-m", QUICK_EXIT_MODULE, "--import", "preloaded_mod", "--import", "no_such_mod",
               "-m", "check_mod"]  # fmt: skip
    env = {**child_env(), "PYTHONPATH": f"{tmp_path}:{child_env().get('PYTHONPATH', '')}"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr


def test_torchrun_failing_before_any_rank_shows_its_own_last_lines(tmp_path: Path) -> None:
    """torchrun that ends with no rank named (its store could not listen, ...): the error shows
    torchrun's own last lines, not its ranks', since the console shows no agent lines while training."""
    import io
    from collections import deque

    from islab.run.processes import Outcome

    layer = {"device": Provided("cpu", "--device"), "nproc_per_node": Provided(2, "--nproc"),
             "log_dir": Provided(str(tmp_path), "--log-dir")}  # fmt: skip
    plan = build_plan(resolve_spec(layer).spec, now=datetime(2026, 3, 4), free_port=45678)
    runner = TorchrunNode(plan, plan.node(0))
    lines = ["[default0]:[islab] rank 0 starting", "torch.distributed.DistStoreError: failed to listen on port 20001",
             "RuntimeError: the server socket has failed to bind"]  # fmt: skip
    err = io.StringIO()
    try:
        assert runner.explain(Outcome(statuses=[1], tails=[deque(lines)]), err, all_ranks=False) == 1
    finally:
        runner.close()
    text = err.getvalue()
    assert "torchrun's last lines:" in text and "failed to listen on port 20001" in text, text
    assert "rank 0 starting" not in text.split("torchrun's last lines:")[1], text
    assert text.rstrip().splitlines()[-1].startswith("error: training failed on node 0 (torchrun exit code 1)")
