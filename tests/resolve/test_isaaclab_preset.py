"""islab.resolve.isaaclab: Isaac Lab's train.py entry point and arguments, and its task ids.

The commands of Isaac Lab's multi-GPU guide ("Multi-GPU and Multi-Node Training"; the c10d one
from a tutorial of that guide) are copied here verbatim; ours are built with the preset plus a
small torchrun/skrl-launcher prefix, and both are parsed by the real parsers (torchrun's
``get_args_parser``, skrl's JAX launcher's, and the fixture train.py's, which mirrors Isaac Lab's)
and compared field for field.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from paths import FIXTURES

from islab.resolve.isaaclab import (
    closest_task_id,
    isaaclab_entry,
    preset_problem,
    registered_task_ids,
    tensorboard_root,
    unknown_task_problem,
)

TREE = FIXTURES / "isaaclab_tree"
LIBS = ("rl_games", "rsl_rl", "skrl")
MASTER = "10.1.2.3"  # stands for the guide's <ip_of_master> / ip_of_master_machine

# --- the guide's commands, verbatim (placeholders filled with MASTER) -------------------------
GUIDE_ONE_NODE = (
    "python -m torch.distributed.run --nnodes=1 --nproc_per_node=2 "
    "scripts/reinforcement_learning/{lib}/train.py --task=Isaac-Cartpole-v0 --headless --distributed"
)
GUIDE_ONE_NODE_JAX = (
    "python -m skrl.utils.distributed.jax --nnodes=1 --nproc_per_node=2 "
    "scripts/reinforcement_learning/skrl/train.py --task=Isaac-Cartpole-v0 --headless --distributed --ml_framework jax"
)
GUIDE_STATIC = (
    "python -m torch.distributed.run --nproc_per_node=2 --nnodes=2 --node_rank={node} --master_addr=<ip_of_master> "
    "--master_port=5555 scripts/reinforcement_learning/{lib}/train.py --task=Isaac-Cartpole-v0 --headless --distributed"
)
GUIDE_STATIC_JAX = (
    "python -m skrl.utils.distributed.jax --nproc_per_node=2 --nnodes=2 --node_rank={node} "
    "--coordinator_address=ip_of_master_machine:5555 scripts/reinforcement_learning/skrl/train.py "
    "--task=Isaac-Cartpole-v0 --headless --distributed --ml_framework jax"
)
# the tutorial's c10d example (rl_games only there; the same shape is applied to the other libraries). It
# writes "–distributed" with an EN DASH, which argparse does not take for --distributed (see
# test_tutorial_en_dash_is_not_the_flag); the intended flag is used here.
GUIDE_C10D_RAW = (
    "${{ISAACSIM_PYTHON_EXE}} -m torch.distributed.run --nproc_per_node=1 --nnodes=2 --node_rank={node} "
    "--rdzv_id=123 --rdzv_backend=c10d --rdzv_endpoint=192.168.150.161:5555 "
    "scripts/reinforcement_learning/{lib}/train.py --task=Isaac-Cartpole-v0 --headless \u2013distributed"
)
GUIDE_C10D = GUIDE_C10D_RAW.replace("\u2013distributed", "--distributed")


def _guide(template: str, **fields) -> list[str]:
    text = template.format(**fields).replace("<ip_of_master>", MASTER).replace("ip_of_master_machine", MASTER)
    return text.split()


# --- our side: preset + a launcher prefix (what islab-train's dry run will print) --------------
def _ours_torchrun(entry, *, nnodes, nproc, node_rank=None, master=None, rdzv=None) -> list[str]:
    argv = ["python", "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc)]
    if node_rank is not None:
        argv += ["--node-rank", str(node_rank)]
    if master is not None:
        argv += ["--master-addr", master[0], "--master-port", str(master[1])]
    if rdzv is not None:
        backend, endpoint, run_id = rdzv
        argv += ["--rdzv-backend", backend, "--rdzv-endpoint", endpoint, "--rdzv-id", run_id]
    return argv + entry.argv()


def _ours_skrl_jax(entry, *, nnodes, nproc, node_rank=None, coordinator=None) -> list[str]:
    argv = ["python", "-m", "skrl.utils.distributed.jax", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc)]
    if node_rank is not None:
        argv += ["--node-rank", str(node_rank)]
    if coordinator is not None:
        argv += ["--coordinator-address", coordinator]
    return argv + entry.argv()


# --- parsing both with the real parsers ----------------------------------------------------------
def _fixture_parser(lib: str):
    script = TREE / "scripts" / "reinforcement_learning" / lib / "train.py"
    sys.path.insert(0, str(script.parent))  # Isaac Lab's rsl_rl script imports its sibling cli_args
    try:
        spec = importlib.util.spec_from_file_location(f"fixture_train_{lib}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # builds the parser; parsing happens only under __main__
    finally:
        sys.path.remove(str(script.parent))
    return module.parser


def _script_fields(lib: str, script: str, args: list[str]) -> dict:
    relative = Path(script).resolve().relative_to(TREE) if Path(script).is_absolute() else Path(script)
    known, unknown = _fixture_parser(lib).parse_known_args(args)
    return {"script": str(relative), **vars(known), "hydra_args": unknown}


def _launcher_fields(argv: list[str], lib: str) -> dict:
    assert argv[1:2] == ["-m"]
    module, rest = argv[2], argv[3:]
    if module == "torch.distributed.run":
        from torch.distributed.run import get_args_parser

        parsed = vars(get_args_parser().parse_args(rest))
        script, args = parsed.pop("training_script"), parsed.pop("training_script_args")
    else:
        assert module == "skrl.utils.distributed.jax"
        from skrl.utils.distributed.jax.launcher import _get_args_parser

        parsed = vars(_get_args_parser().parse_args(rest))
        script, args = parsed.pop("script"), parsed.pop("script_args")
    return {"launcher": module, **parsed, **_script_fields(lib, script, args)}


def _shapes():
    """(name, guide argv, our argv) for every shape of the guide and every library."""
    task = "Isaac-Cartpole-v0"
    for lib in LIBS:
        entry = isaaclab_entry(TREE, lib, task=task)
        yield f"one-node-{lib}", _guide(GUIDE_ONE_NODE, lib=lib), _ours_torchrun(entry, nnodes=1, nproc=2)
        for node in (0, 1):
            yield (
                f"static-node{node}-{lib}",
                _guide(GUIDE_STATIC, lib=lib, node=node),
                _ours_torchrun(entry, nnodes=2, nproc=2, node_rank=node, master=(MASTER, 5555)),
            )
            yield (
                f"c10d-node{node}-{lib}",
                _guide(GUIDE_C10D, lib=lib, node=node),
                _ours_torchrun(entry, nnodes=2, nproc=1, node_rank=node, rdzv=("c10d", "192.168.150.161:5555", "123")),
            )
    jax = isaaclab_entry(TREE, "skrl", "jax", task=task)
    yield "one-node-skrl-jax", _guide(GUIDE_ONE_NODE_JAX), _ours_skrl_jax(jax, nnodes=1, nproc=2)
    for node in (0, 1):
        yield (
            f"two-nodes-node{node}-skrl-jax",
            _guide(GUIDE_STATIC_JAX, node=node),
            _ours_skrl_jax(jax, nnodes=2, nproc=2, node_rank=node, coordinator=f"{MASTER}:5555"),
        )


SHAPES = list(_shapes())


@pytest.mark.parametrize(("guide", "ours"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_dry_run_equals_the_guides_command_when_parsed(guide, ours):
    lib = next(part for part in guide if part.endswith("train.py")).split("/")[-2]
    expected, got = _launcher_fields(guide, lib), _launcher_fields(ours, lib)
    assert got == expected
    assert got["distributed"] and got["headless"] and got["task"] == "Isaac-Cartpole-v0"


def test_tutorial_en_dash_is_not_the_flag():
    """Why GUIDE_C10D corrects the tutorial: its "–distributed" would be a Hydra argument, not the flag."""
    fields = _launcher_fields(_guide(GUIDE_C10D_RAW, lib="rl_games", node=0), "rl_games")
    assert fields["distributed"] is False and fields["hydra_args"] == ["\u2013distributed"]


@pytest.mark.parametrize("lib", LIBS)
def test_preset_fills_each_scripts_own_options(lib):
    entry = isaaclab_entry(
        TREE,
        lib,
        task="Isaac-Cartpole-Direct-v0",
        num_envs=16,
        seed=7,
        max_iterations=3,
        extra_args=["--distributed", "agent.params.config.minibatch_size=64"],
    )
    assert entry.script == TREE / "scripts/reinforcement_learning" / lib / "train.py"
    assert entry.args.count("--distributed") == 1  # not doubled when the user passes it too
    fields = _script_fields(lib, str(entry.script), list(entry.args))
    assert (fields["task"], fields["num_envs"], fields["seed"], fields["max_iterations"]) == (
        "Isaac-Cartpole-Direct-v0",
        16,
        7,
        3,
    )
    assert fields["hydra_args"] == ["agent.params.config.minibatch_size=64"]  # appended verbatim
    if lib == "skrl":
        assert fields["ml_framework"] == "torch"


def test_impossible_presets_are_refused(tmp_path):
    with pytest.raises(ValueError, match="only skrl trains with JAX"):
        isaaclab_entry(TREE, "rsl_rl", "jax", task="T")
    with pytest.raises(ValueError, match="not 'sb3'"):
        isaaclab_entry(TREE, "sb3", task="T")
    assert preset_problem(TREE, "rsl_rl") is None and preset_problem(TREE, "skrl", "jax") is None
    assert "does not exist" in preset_problem(tmp_path, "rsl_rl")
    assert "is not a directory" in preset_problem(tmp_path / "nope", "rsl_rl")


def test_task_ids_are_read_statically():
    assert registered_task_ids(TREE) == [
        "Isaac-Cartpole-Direct-v0",
        "Isaac-Cartpole-RGB-Camera-Direct-v0",
        "Isaac-Cartpole-v0",
    ]
    assert not any(name.startswith("isaaclab_tasks") for name in sys.modules)
    assert closest_task_id("Isaac-Cartpole-Direct-v1", registered_task_ids(TREE)) == "Isaac-Cartpole-Direct-v0"
    assert closest_task_id("isaac-cartpole-v0", registered_task_ids(TREE)) == "Isaac-Cartpole-v0"
    assert closest_task_id("Franka-Reach", registered_task_ids(TREE)) is None
    assert unknown_task_problem("Isaac-Cartpole-v0", TREE) is None
    assert "Did you mean Isaac-Cartpole-Direct-v0?" in unknown_task_problem("Isaac-Cartpole-Direct-v9", TREE)


def test_ids_in_other_shapes_and_no_source_tree(tmp_path):
    package = tmp_path / "source" / "pkg" / "pkg" / "tasks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import gymnasium\nfrom gymnasium import register\n"
        'gymnasium.register(id="A-v0", entry_point=f"{__name__}.env:Env")\n'
        'register("B-v0", entry_point="x:y")\n'
        'for name in ("C", "D"):\n    gymnasium.register(id=f"{name}-v0", entry_point="x:y")  # not literal\n'
    )
    (package.parent / "__init__.py").write_text("def broken(:\n")  # unparsable: skipped
    assert registered_task_ids(tmp_path) == ["A-v0", "B-v0"]
    assert registered_task_ids(tmp_path / "elsewhere") == []
    assert unknown_task_problem("Anything-v0", tmp_path / "elsewhere") is None  # nothing to check against


def test_tensorboard_root_is_isaaclabs_log_root(tmp_path):
    assert tensorboard_root("rsl_rl", tmp_path) == tmp_path / "logs" / "rsl_rl"


def test_unified_entry_point_of_isaaclab_3(tmp_path):
    """Trees between 2.x and 3.0 replaced <lib>/train.py by scripts/reinforcement_learning/train.py
    --rl_library <lib>; the 2.x preset follows whichever layout DIR has (a tree with Isaac Lab 3's
    isaaclab_rl/entrypoints/multigpu.py gets the 3.x preset: tests/resolve/test_isaaclab3_preset.py)."""
    scripts = tmp_path / "scripts" / "reinforcement_learning"
    (scripts / "rsl_rl").mkdir(parents=True)
    (scripts / "train.py").write_text("")
    (scripts / "rsl_rl" / "train_rsl_rl.py").write_text("")
    entry = isaaclab_entry(tmp_path, "rsl_rl", task="Isaac-Cartpole-v0")
    assert entry.script == scripts / "train.py"
    assert entry.args == ("--rl_library", "rsl_rl", "--task", "Isaac-Cartpole-v0", "--headless", "--distributed")
    assert preset_problem(tmp_path, "rsl_rl") is None
    (scripts / "rsl_rl" / "train.py").write_text("")  # the per-library script, when present, wins
    assert isaaclab_entry(tmp_path, "rsl_rl", task="T").script == scripts / "rsl_rl" / "train.py"


# --- the full `islab-train --isaaclab ... --dry-run --json` against the guide ---------------------
# What islab-train adds on purpose: --rdzv_conf (its rendezvous timeout); with c10d no --node_rank
# (torchrun assigns node ranks under c10d and ignores the flag).
def _cli_shapes():
    task = ("--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0")
    for lib in LIBS:
        yield f"one-node-{lib}", _guide(GUIDE_ONE_NODE, lib=lib), ("--lib", lib, "--gpus", "2", *task)
        for node in (0, 1):
            static = ("--nnodes", "2", "--node-rank", str(node), "--master-addr", MASTER, "--master-port", "5555")
            yield f"static-node{node}-{lib}", _guide(GUIDE_STATIC, lib=lib, node=node), ("--lib", lib, "--gpus", "2",
                                                                                         *static, *task)  # fmt: skip
            c10d = ("--nnodes", "2", "--node-rank", str(node), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "192.168.150.161:5555", "--rdzv-id", "123")  # fmt: skip
            yield f"c10d-node{node}-{lib}", _guide(GUIDE_C10D, lib=lib, node=node), ("--lib", lib, "--gpus", "1",
                                                                                     *c10d, *task)  # fmt: skip
    jax = ("--lib", "skrl", "--ml-framework", "jax", "--gpus", "2", *task)
    yield "one-node-skrl-jax", _guide(GUIDE_ONE_NODE_JAX), jax
    for node in (0, 1):
        two = ("--nnodes", "2", "--node-rank", str(node), "--coordinator-address", f"{MASTER}:5555")
        yield f"two-nodes-node{node}-skrl-jax", _guide(GUIDE_STATIC_JAX, node=node), (*jax, *two)


CLI_SHAPES = list(_cli_shapes())


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize(("guide", "args"), [s[1:] for s in CLI_SHAPES], ids=[s[0] for s in CLI_SHAPES])
def test_islab_train_dry_run_equals_the_guides_command_when_parsed(islab, guide, args):
    code, out, err = islab("--dry-run", "--json", *args)
    assert code == 0, err
    ours = json.loads(out)["nodes"][0]["argv"]
    lib = next(part for part in guide if part.endswith("train.py")).split("/")[-2]
    expected, got = _launcher_fields(guide, lib), _launcher_fields(ours, lib)
    got.pop("rdzv_conf", None), expected.pop("rdzv_conf", None)
    if got.get("rdzv_backend") == "c10d":
        got.pop("node_rank"), expected.pop("node_rank")
    if str(got.get("nnodes")) == "1":  # one node: islab-train picks a free local port (the guide: the default)
        for name in ("master_addr", "master_port", "coordinator_address"):
            got.pop(name, None), expected.pop(name, None)
    assert got == expected


def _fixture_common():
    path = TREE / "scripts" / "reinforcement_learning" / "fixture_common.py"
    spec = importlib.util.spec_from_file_location("fixture_common_for_devices", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("lib", LIBS)
def test_cpu_ranks_really_run_on_cpu_in_isaaclabs_train_or_are_refused(lib):
    """Issue 23 item 9: under --distributed every Isaac Lab train.py moves the simulation and the agent
    to cuda:<local rank> whatever --device says (the fixture's sim_device mirrors those lines of
    scripts/reinforcement_learning/<lib>/train.py). One CPU rank: the device train.py ends up with is
    cpu; several CPU ranks: refused before launch, with the reason."""
    from islab.resolve.resolve import Provided, resolve_spec
    from islab.spec.issues import SpecError

    def spec(**values):
        layer = {"isaaclab": str(TREE), "task": "Isaac-Cartpole-v0", "lib": lib, **values}
        return resolve_spec({name: Provided(value, f"--{name}") for name, value in layer.items()}).spec

    common = _fixture_common()
    for values, local_ranks, device in (({"device": "cpu"}, (0,), "cpu"),
                                        ({"device": "cuda", "nproc_per_node": 2}, (0, 1), "cuda:{}")):  # fmt: skip
        args, _ = _fixture_parser(lib).parse_known_args(list(spec(**values).args))
        assert [common.sim_device(args, rank) for rank in local_ranks] == [device.format(r) for r in local_ranks]
    for values in ({"device": "cpu", "nproc_per_node": 2}, {"device": "cpu", "nnodes": 2, "node_rank": 0,
                                                              "rendezvous.master_addr": "10.0.0.1"}):  # fmt: skip
        with pytest.raises(SpecError) as refused:
            spec(**values)
        message = refused.value.issues[0].message()
        assert message.startswith("error: --device:") and "cuda:<local rank>" in message, message
