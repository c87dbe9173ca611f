"""Every rank of ``islab-train --isaaclab auto`` runs what Isaac Lab 3.0's own launcher,
``isaaclab train_multigpu``, builds for the same job.

The launcher is the installed ``isaaclab/cli/multigpu.py`` (standard library only), loaded by file
path; its configuration is read from the installed ``isaaclab_rl/entrypoints/multigpu.py`` without
importing that file (it imports warp and torch): ``LAUNCHER_CFG``'s keywords, ``WORKER_SCRIPT`` (the
file itself) and ``MULTI_GPU_BACKENDS`` (``isaaclab_rl/entrypoints/api.py``). Its
``run_train_multigpu_cli`` appends ``--run_timestamp=<launch time>`` unless given; the test appends
the timestamp islab-train chose, so the two commands are compared for one launch.

For each job shape both commands are compared field by field: the launcher module, its options as
the launcher's own parser reads them (torchrun's ``get_args_parser``, skrl's JAX launcher's) and, per
rank, the script and its arguments -- equal as lists. What differs on purpose is listed in
:data:`DIFFERENCES` and justified in docs/ISAACLAB.md ("Against isaaclab train_multigpu").
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from isaaclab3_venv import ISAACLAB_PYTHON

MASTER = "10.1.2.3"
TASK = ("--task", "Isaac-Cartpole")

# Fields of the launcher's options that differ on purpose (docs/ISAACLAB.md, "Against isaaclab
# train_multigpu"), with when they do.
DIFFERENCES = {
    # islab filters the console itself (rank 0's output, every failing rank's traceback) from its
    # per-rank logs: at launch it adds --tee 3 and --log-dir instead (not part of a dry run).
    "local_ranks_filter": ("one node", "static", "c10d"),
    # one node: islab picks 127.0.0.1 and a free port (two jobs on one machine do not collide);
    # Isaac Lab leaves the launchers' defaults (torchrun 29500, skrl's JAX launcher 127.0.0.1:5000).
    "master_port": ("one node",),
    "coordinator_address": ("jax one node",),
    # c10d: torchrun assigns node ranks itself; islab does not pass --node_rank (torchrun ignores it).
    "node_rank": ("c10d",),
}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _literal_assignment(path: Path, name: str) -> Any:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                return node.value
    raise AssertionError(f"{name} not found in {path}")


@pytest.fixture(scope="module")
def launcher(isaaclab_site):
    """(Isaac Lab's launcher module, its train_multigpu configuration, the per-rank file)."""
    module = _load(isaaclab_site / "isaaclab" / "cli" / "multigpu.py", "isaaclab_cli_multigpu_under_test")
    entry = isaaclab_site / "isaaclab_rl" / "entrypoints" / "multigpu.py"
    backends = ast.literal_eval(_literal_assignment(entry.parent / "api.py", "MULTI_GPU_BACKENDS"))
    call = _literal_assignment(entry, "LAUNCHER_CFG")
    names = {"WORKER_SCRIPT": str(entry.resolve()), "MULTI_GPU_BACKENDS": backends}
    keywords = {
        kw.arg: names[kw.value.id] if isinstance(kw.value, ast.Name) else ast.literal_eval(kw.value)
        for kw in call.keywords
    }
    source = entry.read_text(encoding="utf-8")
    # run_train_multigpu_cli: the one launch timestamp every rank gets, unless the user gave one
    assert "argv.append(f\"--run_timestamp={datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}\")" in source
    return module, module.MultiGpuLauncherCfg(**keywords), entry.resolve()


def isaac_lab_command(launcher, argv: list[str], stamp: str) -> list[str]:
    module, cfg, _ = launcher
    argv = list(argv)
    if not any(arg.startswith("--run_timestamp") for arg in argv):
        argv.append(f"--run_timestamp={stamp}")
    args_cli, worker_args = module.parse_launcher_args(argv, cfg)
    return module.build_launch_command(args_cli, worker_args, cfg)


def islab_command(islab, args: tuple[str, ...]) -> list[str]:
    code, out, err = islab("--dry-run", "--json", "--isaaclab", "auto", "--python", str(ISAACLAB_PYTHON), *args)
    assert code == 0, err
    return json.loads(out)["nodes"][0]["argv"]


def launcher_fields(argv: list[str]) -> dict[str, Any]:
    """The launcher module, its options as its parser reads them, and the rank's script + arguments."""
    assert argv[1] == "-m", argv
    module, rest = argv[2], argv[3:]
    if module == "torch.distributed.run":
        from torch.distributed.run import get_args_parser

        parsed = vars(get_args_parser().parse_args(rest))
        script, args = parsed.pop("training_script"), parsed.pop("training_script_args")
        low, _, high = str(parsed["nnodes"]).partition(":")
        parsed["nnodes"] = f"{low}:{high or low}"  # torchrun reads "1" as "1:1", its default
    else:
        assert module == "skrl.utils.distributed.jax", argv
        from skrl.utils.distributed.jax.launcher import _get_args_parser

        parsed = vars(_get_args_parser().parse_args(rest))
        script, args = parsed.pop("script"), parsed.pop("script_args")
    return {"launcher": module, "options": parsed, "rank": [script, *args]}


# (name, Isaac Lab's train_multigpu arguments, islab-train's, shape) -- shape: which DIFFERENCES apply
STATIC = ("--nnodes", "2", "--master_addr", MASTER, "--master_port", "5555")
STATIC_ISLAB = ("--nnodes", "2", "--master-addr", MASTER, "--master-port", "5555")
C10D = ("--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{MASTER}:29400", "--rdzv_id", "job7")
C10D_ISLAB = ("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{MASTER}:29400", "--rdzv-id", "job7")
OVERRIDES = ("--num_envs", "64", "--seed", "7", "--max_iterations", "5")
# fmt: off
SHAPES = [
    *[(f"one-node-{lib}", ["--rl_library", lib, "--num_gpus", "2", *TASK], ("--lib", lib, "--gpus", "2", *TASK),
       "one node") for lib in ("rsl_rl", "rl_games", "skrl")],
    ("default-library", ["--num_gpus", "4", *TASK], ("--gpus", "4", *TASK), "one node"),
    ("skrl-jax", ["--rl_library", "skrl", "--num_gpus", "2", *TASK, "--ml_framework", "jax"],
     ("--lib", "skrl", "--ml-framework", "jax", "--gpus", "2", *TASK), "jax one node"),
    *[(f"static-node{node}", ["--num_gpus", "2", *STATIC, "--node_rank", str(node), *TASK],
       ("--gpus", "2", *STATIC_ISLAB, "--node-rank", str(node), *TASK), "static") for node in (0, 1)],
    *[(f"c10d-node{node}", ["--num_gpus", "2", *C10D, "--node_rank", str(node), *TASK],
       ("--gpus", "2", *C10D_ISLAB, "--node-rank", str(node), *TASK), "c10d") for node in (0, 1)],
    ("skrl-jax-two-nodes", ["--rl_library", "skrl", "--num_gpus", "2", "--nnodes", "2", "--node_rank", "1",
                            "--coordinator_address", f"{MASTER}:5000", *TASK, "--ml_framework", "jax"],
     ("--lib", "skrl", "--ml-framework", "jax", "--gpus", "2", "--nnodes", "2", "--node-rank", "1",
      "--coordinator-address", f"{MASTER}:5000", *TASK), "jax"),
    ("overrides", ["--rl_library", "rl_games", "--num_gpus", "2", *TASK, *OVERRIDES,
                   "agent.params.config.learning_rate=0.001", "env.sim.dt=0.01"],
     ("--lib", "rl_games", "--gpus", "2", *TASK, "--num-envs", "64", "--seed", "7", "--max-iterations", "5",
      "agent.params.config.learning_rate=0.001", "env.sim.dt=0.01"), "one node"),
    ("presets-physics-viz", ["--num_gpus", "2", *TASK, "presets=newton", "physics=newton_mjwarp", "--viz", "none"],
     ("--gpus", "2", *TASK, "presets=newton", "physics=newton_mjwarp", "--", "--viz", "none"), "one node"),
    ("users-timestamp-two-nodes", ["--num_gpus", "2", *STATIC, "--node_rank", "0", *TASK, "--run_timestamp=nightly"],
     ("--gpus", "2", *STATIC_ISLAB, "--node-rank", "0", *TASK, "--", "--run_timestamp=nightly"), "static"),
    ("max-restarts", ["--num_gpus", "2", "--max_restarts", "3", *TASK],
     ("--gpus", "2", "--max-restarts", "3", *TASK), "one node"),
]
# fmt: on


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize(("isaac_lab", "ours", "shape"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_each_rank_runs_what_isaaclab_train_multigpu_runs(islab, launcher, monkeypatch, isaac_lab, ours, shape):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # Isaac Lab's launcher counts the GPUs it may use
    mine = islab_command(islab, ours)
    stamp = next((arg for arg in mine if arg.startswith("--run_timestamp=")), "--run_timestamp=")[16:]
    theirs = isaac_lab_command(launcher, isaac_lab, stamp)
    got, expected = launcher_fields(mine), launcher_fields(theirs)
    assert got["launcher"] == expected["launcher"]
    assert got["rank"] == expected["rank"]  # the same file, the same arguments in the same order
    assert got["rank"][0] == str(launcher[2]) and "--headless" not in got["rank"]
    differing = {name for name in got["options"] if got["options"][name] != expected["options"].get(name)}
    allowed = {name for name, shapes in DIFFERENCES.items() if shape in shapes}
    assert differing <= allowed, {name: (got["options"][name], expected["options"][name]) for name in differing}


def test_virtual_local_rank_is_not_a_30_launcher_option(launcher, monkeypatch):
    """3.0.0's train_multigpu has no --virtual_local_rank (later releases map it to torchrun's
    --virtual-local-rank): 3.0.0 hands it to every rank's trainer as one of the trainer's arguments.
    islab-train's --virtual-local-rank is torchrun's option (tests/isaaclab3 docs: docs/ISAACLAB.md)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    module, cfg, _ = launcher
    options = {flag for action in module.build_parser(cfg)._actions for flag in action.option_strings}
    if "--virtual_local_rank" in options:
        pytest.fail("this Isaac Lab's launcher defines --virtual_local_rank: compare it as a job shape")
    command = isaac_lab_command(launcher, ["--num_gpus", "2", *TASK, "--virtual_local_rank"], "S")
    assert command[command.index(str(launcher[2])) :][-3:] == ["--virtual_local_rank", "--run_timestamp=S",
                                                                "--distributed"]  # fmt: skip


def test_every_train_multigpu_option_is_in_the_docs_table(launcher):
    """docs/ISAACLAB.md maps every option of the installed launcher to islab-train's (or says why not)."""
    from paths import DOCS

    module, cfg, _ = launcher
    table = (DOCS / "ISAACLAB.md").read_text(encoding="utf-8")
    options = {flag for action in module.build_parser(cfg)._actions for flag in action.option_strings}
    options -= {"-h", "--help"}
    missing = sorted(flag for flag in options if not re.search(rf"`{flag}[` ]", table))
    assert not missing, f"docs/ISAACLAB.md's table lacks {missing}"
