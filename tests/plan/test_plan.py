"""plan.py: generated commands, checked by feeding them back through the real launcher parsers.

torchrun's own ``get_args_parser()`` and skrl's JAX launcher parser must read back every value we
meant; the worker arguments are read back with a parser of docs/ARCHITECTURE.md's worker command
line. (These tests import torch and skrl; the planner itself must not -- see test_cli.py.)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import datetime
from pathlib import Path

import pytest
from paths import FIXTURES, TESTS

from islab.plan.dry_run import format_json, format_text, shell_line
from islab.plan.launch_issues import launch_issues
from islab.plan.plan import build_plan, plan_env
from islab.resolve.resolve import Provided, ResolvedSpec, resolve_spec
from islab.spec.budget import Budget
from islab.spec.run_spec import RunSpec
from islab.worker import ENTRY_SCRIPT

NOW = datetime(2026, 3, 4, 5, 6, 7)
FREE_PORT = 45678
STAMP = "2026-03-04_05-06-07"


def resolved(**values: object) -> ResolvedSpec:
    layer = {name.replace("__", "."): Provided(value, f"--{name}") for name, value in values.items()}
    layer.setdefault("python", Provided("/opt/py/bin/python", "--python"))
    return resolve_spec(layer)


def plan_for(**values: object):
    return build_plan(resolved(**values).spec, now=NOW, free_port=FREE_PORT)


def torchrun_args(argv: tuple[str, ...]) -> argparse.Namespace:
    from torch.distributed.run import get_args_parser

    assert argv[:3] == ("/opt/py/bin/python", "-m", "torch.distributed.run")
    return get_args_parser().parse_args(list(argv[3:]))


def jax_launcher_args(argv: tuple[str, ...]) -> argparse.Namespace:
    from skrl.utils.distributed.jax.launcher import _get_args_parser

    assert argv[:3] == ("/opt/py/bin/python", "-m", "skrl.utils.distributed.jax")
    return _get_args_parser().parse_args(list(argv[3:]))


def check_worker(args: list[str], **expected: object) -> argparse.Namespace:
    """Parse with the real worker's own parser, so the two sides cannot drift apart."""
    from islab.worker.__main__ import parse_args

    worker = parse_args(list(args))
    for name, value in expected.items():
        got = getattr(worker, name)
        assert (str(got) if isinstance(got, Path) else got) == value, name
    assert worker.distributed
    return worker


# ----------------------------------------------------------------------------------------------
# torchrun
# ----------------------------------------------------------------------------------------------


def test_workstation_two_gpus():
    plan = plan_for(lib="rsl_rl", device="cuda", nproc_per_node=2, num_envs=1024, seed=3)
    assert plan.launcher == "torchrun" and len(plan.nodes) == 1
    args = torchrun_args(plan.nodes[0].argv)
    assert (args.nproc_per_node, args.nnodes, args.node_rank) == ("2", "1", 0)
    assert (args.master_addr, args.master_port, args.max_restarts) == ("127.0.0.1", FREE_PORT, 0)
    assert args.rdzv_backend == "static"
    assert args.module and args.training_script == "islab.worker"
    run_dir = f"logs/rsl_rl/Islab-Cartpole-v0/{STAMP}"
    check_worker(
        args.training_script_args, lib="rsl_rl", ml_framework="torch", task="Islab-Cartpole-v0",
        num_envs=1024, seed=3, max_iterations=150, device="cuda", run_dir=run_dir, overrides=[],
    )  # fmt: skip
    assert plan.run_dir == run_dir and plan.node0_port == FREE_PORT


def test_exact_torchrun_argv_shape():
    argv = plan_for(device="cpu", nproc_per_node=2).nodes[0].argv
    assert list(argv[:17]) == [
        "/opt/py/bin/python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
        "--node_rank", "0", "--master_addr", "127.0.0.1", "--master_port", str(FREE_PORT),
        "--max_restarts", "0", "-m", "islab.worker",
    ]  # fmt: skip


def test_multinode_static_plans_every_node():
    plan = plan_for(nnodes=2, nproc_per_node=4, rendezvous__master_addr="10.0.0.1", max_restarts=2)
    assert [node.node_rank for node in plan.nodes] == [0, 1]
    for node in plan.nodes:
        args = torchrun_args(node.argv)
        assert (args.nproc_per_node, args.nnodes, args.node_rank) == ("4", "2", node.node_rank)
        # no probed port: every node must agree without talking first
        assert (args.master_addr, args.master_port, args.max_restarts) == ("10.0.0.1", 29500, 2)
    assert plan.node0_port == 29500


def test_multinode_with_node_rank_plans_that_node_only():
    plan = plan_for(nnodes=3, node_rank=2, rendezvous__master_addr="node0", rendezvous__master_port=6000)
    assert [node.node_rank for node in plan.nodes] == [2]
    args = torchrun_args(plan.nodes[0].argv)
    assert (args.node_rank, args.master_addr, args.master_port) == (2, "node0", 6000)


def test_multinode_c10d_has_no_node_rank():
    plan = plan_for(
        lib="rl_games", nnodes=2, nproc_per_node=2, rendezvous__backend="c10d",
        rendezvous__endpoint="node0.cluster:29400", rendezvous__id="job-7",
    )  # fmt: skip
    for node in plan.nodes:
        assert "--node_rank" not in node.argv and "--master_addr" not in node.argv
        args = torchrun_args(node.argv)
        assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("c10d", "node0.cluster:29400", "job-7")
        assert (args.nnodes, args.nproc_per_node) == ("2", "2")
        check_worker(args.training_script_args, lib="rl_games")
    assert plan.node0_port is None


def test_single_node_c10d_defaults_to_local_endpoint():
    args = torchrun_args(plan_for(rendezvous__backend="c10d").nodes[0].argv)
    assert (args.rdzv_endpoint, args.rdzv_id) == (f"127.0.0.1:{FREE_PORT}", "islab")


def test_cpu_ranks_and_overrides():
    plan = plan_for(
        lib="skrl", device="cpu", nproc_per_node=2, num_envs=64, overrides=("agent.learning_rate=0.1", "+x.y=[1, 2]")
    )
    args = torchrun_args(plan.nodes[0].argv)
    assert args.nproc_per_node == "2"
    check_worker(
        args.training_script_args,
        lib="skrl",
        device="cpu",
        num_envs=64,
        overrides=["agent.learning_rate=0.1", "+x.y=[1, 2]"],
    )
    assert dict(plan.nodes[0].env) == {"GIT_PYTHON_REFRESH": "quiet"}


# ----------------------------------------------------------------------------------------------
# skrl-JAX
# ----------------------------------------------------------------------------------------------


def test_jax_single_node():
    plan = plan_for(lib="skrl", ml_framework="jax", device="cuda", nproc_per_node=2)
    assert plan.launcher == "skrl-jax"
    args = jax_launcher_args(plan.nodes[0].argv)
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == (1, 2, 0)
    assert args.coordinator_address == f"127.0.0.1:{FREE_PORT}"  # not skrl's fixed 5000
    # portable: the module form, no path of this machine's worker file (issue 14 item 6)
    assert (args.script, args.script_args[0]) == ("-m", "islab.worker")
    assert str(ENTRY_SCRIPT.parent) not in " ".join(plan.nodes[0].argv)
    check_worker(args.script_args[1:], lib="skrl", ml_framework="jax", device="cuda")
    assert dict(plan.nodes[0].env) == {"GIT_PYTHON_REFRESH": "quiet", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert plan.node0_port == FREE_PORT


def test_jax_cpu_sets_jax_platforms():
    env = plan_env(resolved(lib="skrl", ml_framework="jax", device="cpu").spec)
    assert env["JAX_PLATFORMS"] == "cpu" and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_jax_multinode_ranks_match_what_skrls_launcher_would_set(monkeypatch):
    """Run skrl's real launch() on our argv (process start intercepted) and compare the env of
    every rank with the ranks islab-train starts itself."""
    from skrl.utils.distributed.jax import launcher

    for name in [name for name in os.environ if name.startswith("JAX_")]:  # e.g. the session's compile cache
        monkeypatch.delenv(name)
    plan = plan_for(
        lib="skrl", ml_framework="jax", device="cpu", nnodes=2, nproc_per_node=2,
        coordinator_address="10.0.0.1:7777",
    )  # fmt: skip
    for node in plan.nodes:
        captured = {}

        def fake_start(cmd, envs, nprocs, captured=captured):
            captured.update(cmd=cmd, envs=envs, nprocs=nprocs)

        monkeypatch.setattr(launcher, "_start_processes", fake_start)
        monkeypatch.setattr(sys, "argv", ["launcher", *node.argv[3:]])
        launcher.launch()
        assert captured["nprocs"] == 2 == len(node.ranks)
        assert captured["cmd"][1:] == list(node.ranks[0].argv[1:])  # [script, *args]
        for rank, skrl_env in zip(node.ranks, captured["envs"], strict=True):
            jax_vars = {k: v for k, v in skrl_env.items() if k.startswith("JAX_") and k != "JAX_PLATFORMS"}
            ours = {k: v for k, v in rank.env.items() if k.startswith("JAX_") and k != "JAX_PLATFORMS"}
            # One variable is ours: the ranks of this node, which skrl's launcher does not export.
            assert ours.pop("JAX_LOCAL_WORLD_SIZE") == "2"
            assert ours == jax_vars
        assert [r.global_rank for r in node.ranks] == [node.node_rank * 2, node.node_rank * 2 + 1]
    assert plan.nodes[1].ranks[1].env["JAX_RANK"] == "3"
    assert plan.nodes[1].ranks[1].env["JAX_WORLD_SIZE"] == "4"


# ----------------------------------------------------------------------------------------------
# Run directory and printing
# ----------------------------------------------------------------------------------------------


def test_run_dir_uses_clock_and_run_name():
    plan = plan_for(lib="rl_games", run_name="exp_1", log_dir="/data/runs")
    assert plan.run_dir == f"/data/runs/rl_games/Islab-Cartpole-v0/{STAMP}_exp_1"
    a_second_later = build_plan(resolved().spec, now=datetime(2026, 3, 4, 5, 6, 8), free_port=FREE_PORT).run_dir
    assert a_second_later == "logs/rsl_rl/Islab-Cartpole-v0/2026-03-04_05-06-08" != plan_for().run_dir


def test_run_dirs_are_named_by_what_ran():
    """Isaac Lab's train.py, mjlab's train and a user's entry point are not islab's <lib>/<task>
    (issue 23 item 11: they were logs/rsl_rl/train/...)."""
    tree = str(FIXTURES / "isaaclab_tree")
    isaaclab = plan_for(device="cpu", lib="rl_games", isaaclab=tree, task="Isaac-Cartpole-v0")
    assert isaaclab.run_dir == f"logs/isaaclab-rl_games/Isaac-Cartpole-v0/{STAMP}"
    mjlab = plan_for(device="cpu", mjlab=True, task="Mjlab-Cartpole-Balance", run_name="a")
    assert mjlab.run_dir == f"logs/mjlab/Mjlab-Cartpole-Balance/{STAMP}_a"
    for kind, name, label in (("script", "/x/ddp_finetune.py", "ddp_finetune"), ("module", "pkg.train", "pkg.train"),
                              ("command", "train", "train")):  # fmt: skip
        plan = plan_for(device="cpu", entrypoint={kind: name})
        assert plan.run_dir == f"logs/{kind}/{label}/{STAMP}", plan.run_dir
    assert plan_for(device="cpu").run_dir == f"logs/rsl_rl/Islab-Cartpole-v0/{STAMP}"  # our worker: unchanged


def test_every_node_of_a_job_names_the_same_run_dir_whatever_its_clock():
    two_nodes = {"nnodes": 2, "rendezvous.master_addr": "10.0.0.1", "rendezvous.master_port": 29500}

    def node(rank: int, now: datetime, **values: object) -> str:
        return build_plan(resolved(**two_nodes, node_rank=rank, **values).spec, now=now, free_port=FREE_PORT).run_dir

    later = datetime(2026, 3, 4, 5, 6, 8)
    assert node(0, NOW) == node(1, later) and STAMP not in node(0, NOW)
    assert node(0, NOW, seed=1) != node(0, NOW)  # another job (another spec) gets its own
    c10d = {"rendezvous.backend": "c10d", "rendezvous.endpoint": "n0:29400", "rendezvous.id": "job-42"}
    by_id = build_plan(resolved(nnodes=2, run_name="x", **c10d).spec, now=later, free_port=FREE_PORT).run_dir
    assert by_id.endswith("/Islab-Cartpole-v0/job-42_x"), by_id


def test_json_shape_is_exact_and_secrets_masked(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("env: {WANDB_API_KEY: hunter2, NCCL_DEBUG: INFO}\ndevice: cpu\nnproc_per_node: 2\n")
    spec = resolve_spec({"python": Provided("/opt/py/bin/python", "--python")}, None, cluster).spec
    plan = build_plan(spec, now=NOW, free_port=FREE_PORT)
    data = json.loads(format_json(plan))
    assert set(data) == {"launcher", "budget", "nodes"}
    assert data["launcher"] == "torchrun"
    assert data["budget"] == {
        "total_env_steps": None, "max_iterations": 150, "iterations": 150, "world_size": 2,
        "world_size_range": [2, 2], "num_envs_per_rank": 4096, "rollout_length": 16, "env_steps": 150 * 2 * 4096 * 16,
    }  # fmt: skip
    (node,) = data["nodes"]
    assert set(node) == {"node_rank", "argv", "env"}
    assert node["node_rank"] == 0 and node["argv"] == list(plan.nodes[0].argv)
    assert node["env"] == {"WANDB_API_KEY": "****", "NCCL_DEBUG": "INFO", "GIT_PYTHON_REFRESH": "quiet"}
    assert plan.nodes[0].env["WANDB_API_KEY"] == "hunter2"  # the real value is what runs
    assert "hunter2" not in format_json(plan)
    assert "hunter2" not in format_text(plan, resolve_spec(None, None, cluster))


def test_text_lines_are_pasteable_with_hostile_values():
    hostile = "/tmp/my logs/$(touch pwned);'q\"`"
    spec = resolved(log_dir=hostile, device="cpu").spec
    plan = build_plan(spec, now=NOW, free_port=FREE_PORT)
    line = shell_line(plan.nodes[0].argv, {"NCCL_DEBUG": "a b;c"})
    tokens = shlex.split(line)
    assert tokens[0] == "NCCL_DEBUG=a b;c"
    assert tokens[1:] == list(plan.nodes[0].argv)
    assert f"{hostile}/rsl_rl/Islab-Cartpole-v0/{STAMP}" in tokens


def test_text_output_labels_nodes_and_explains_sources():
    res = resolved(nnodes=2, rendezvous__master_addr="10.0.0.1", device="cpu")
    text = format_text(build_plan(res.spec, now=NOW, free_port=FREE_PORT), res)
    assert "# node 0\n" in text and "# node 1\n" in text
    assert "nnodes" in text and "(source: cli, --nnodes)" in text
    assert "seed                   = 42  (source: default)" in text
    assert "rendezvous.master_port = 29500  (source: default, chosen by the planner)" in text
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(commands) == 2 and all(c.startswith("GIT_PYTHON_REFRESH=quiet /opt/py/bin/python") for c in commands)


# ----------------------------------------------------------------------------------------------
# Launch checks
# ----------------------------------------------------------------------------------------------


def fields(issues) -> list[str]:
    return [issue.field for issue in issues]


def test_launch_issues():
    gpu2 = resolved(device="cuda", nproc_per_node=2).spec
    assert launch_issues(gpu2, platform="linux", visible_gpus=2) == []
    (issue,) = launch_issues(gpu2, platform="linux", visible_gpus=1)
    assert "--gpus 1" in issue.fix and "--device cpu --nproc 2" in issue.fix
    (issue,) = launch_issues(gpu2, platform="linux", visible_gpus=0)
    assert issue.field == "device" and "--device cpu --nproc 2" in issue.fix
    cpu = resolved(device="cpu", nproc_per_node=2).spec
    assert launch_issues(cpu, platform="linux", visible_gpus=0) == []
    assert fields(launch_issues(cpu, platform="win32", visible_gpus=0)) == ["platform"]
    assert "NCCL" in launch_issues(gpu2, platform="win32", visible_gpus=2)[0].problem


def test_multinode_launch_needs_node_rank_except_c10d():
    static = resolved(device="cpu", nnodes=2, rendezvous__master_addr="10.0.0.1").spec
    assert fields(launch_issues(static, platform="linux", visible_gpus=0)) == ["node_rank"]
    jax = resolved(lib="skrl", ml_framework="jax", device="cpu", nnodes=2, coordinator_address="h:1").spec
    assert fields(launch_issues(jax, platform="linux", visible_gpus=0)) == ["node_rank"]
    c10d = resolved(device="cpu", nnodes=2, rendezvous__backend="c10d", rendezvous__endpoint="h:1").spec
    assert launch_issues(c10d, platform="linux", visible_gpus=0) == []


@pytest.mark.parametrize("module", ["islab.plan.plan", "islab.spec.run_spec", "islab.run.supervise", "islab.cli"])
def test_launcher_modules_do_not_import_torch(module):
    import subprocess

    heavy = ("torch", "numpy", "jax", "skrl", "gymnasium")
    code = f"import sys, {module}; print([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=TESTS)  # fmt: skip
    assert result.stdout.strip() == "[]"


# ----------------------------------------------------------------------------------------------
# Rendezvous timeout and elastic membership, read back by torchrun itself
# ----------------------------------------------------------------------------------------------


def torchrun_config(argv: tuple[str, ...]):
    from torch.distributed.run import config_from_args

    config, _, _ = config_from_args(torchrun_args(argv))
    return config


def test_static_rendezvous_timeout_reaches_torchruns_store_config():
    plan = plan_for(device="cpu", nnodes=2, node_rank=0, rendezvous__master_addr="10.0.0.1", rendezvous__timeout_s=42)
    config = torchrun_config(plan.nodes[0].argv)
    assert config.rdzv_backend == "static"
    assert int(config.rdzv_configs["timeout"]) == 42  # static_tcp_rendezvous.py: the TCPStore timeout
    assert (plan.rendezvous_address, plan.rendezvous_timeout_s) == ("10.0.0.1:29500", 42)


def test_elastic_c10d_passes_min_max_and_join_timeout_to_torchrun():
    plan = plan_for(
        device="cpu", nnodes="1:2", rendezvous__backend="c10d", rendezvous__endpoint="10.0.0.1:29400",
        rendezvous__timeout_s=17, max_restarts=3,
    )  # fmt: skip
    argv = plan.nodes[0].argv
    args = torchrun_args(argv)
    assert args.nnodes == "1:2"
    config = torchrun_config(argv)
    assert (config.min_nodes, config.max_nodes) == (1, 2)
    assert int(config.rdzv_configs["join_timeout"]) == 17
    assert "last_call_timeout" not in config.rdzv_configs  # not given: torchrun's own 30 s
    assert config.max_restarts == 3
    assert plan.rendezvous_address == "10.0.0.1:29400"
    assert "1-2 node(s)" in format_text(plan, resolved(
        device="cpu", nnodes="1:2", rendezvous__backend="c10d", rendezvous__endpoint="10.0.0.1:29400"
    ))  # fmt: skip


def test_elastic_c10d_last_call_reaches_torchrun():
    """``--rdzv-last-call``: what torchrun's c10d handler reads as its last-call timeout."""
    from datetime import timedelta

    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout, _get_timeout

    argv = plan_for(
        device="cpu", nnodes="1:2", rendezvous__backend="c10d", rendezvous__endpoint="10.0.0.1:29400",
        rendezvous__last_call_s=4,
    ).nodes[0].argv  # fmt: skip
    config = torchrun_config(argv)
    params = RendezvousParameters(
        config.rdzv_backend, config.rdzv_endpoint, config.run_id, config.min_nodes, config.max_nodes,
        **config.rdzv_configs,
    )  # fmt: skip
    assert _get_timeout(params, "last_call") == timedelta(seconds=4)  # what create_handler passes on
    assert RendezvousTimeout(join=_get_timeout(params, "join")).join == timedelta(seconds=600)  # torch's own


def test_without_rdzv_timeout_torch_applies_its_own_defaults_and_the_plan_knows_them():
    """Isaac Sim can take minutes to start on a node: no timeout of ours below torch's (issue 23 item 10).
    What torchrun itself makes of the printed command: static 900 s (LaunchConfig), c10d join 600 s."""
    from datetime import timedelta

    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout, _get_timeout

    static = plan_for(device="cpu", nnodes=2, rendezvous__master_addr="10.0.0.1")
    config = torchrun_config(static.nodes[0].argv)
    assert int(config.rdzv_configs["timeout"]) == 900 == static.rendezvous_timeout_s
    assert static.hang_timeout_s == 1800 and static.derived["rendezvous.timeout_s"] == "900"
    assert check_worker(torchrun_args(static.nodes[0].argv).training_script_args).peer_timeout == 900
    c10d = plan_for(device="cpu", nnodes=2, rendezvous__backend="c10d", rendezvous__endpoint="10.0.0.1:29400")
    config = torchrun_config(c10d.nodes[0].argv)
    params = RendezvousParameters(
        config.rdzv_backend, config.rdzv_endpoint, config.run_id, config.min_nodes, config.max_nodes,
        **config.rdzv_configs,
    )  # fmt: skip
    join = RendezvousTimeout(join=_get_timeout(params, "join")).join  # what create_handler builds
    assert join == timedelta(seconds=600) and c10d.rendezvous_timeout_s == 600
    assert c10d.hang_timeout_s == 1200
    assert plan_for(lib="skrl", ml_framework="jax", device="cpu").rendezvous_timeout_s == 300  # JAX's own


def test_jax_plan_carries_the_rendezvous_timeout_for_the_supervisor():
    plan = plan_for(lib="skrl", ml_framework="jax", device="cpu", rendezvous__timeout_s=11)
    assert plan.rendezvous_timeout_s == 11
    assert plan.rendezvous_address == f"127.0.0.1:{FREE_PORT}"


def test_c10d_node_facts_host_the_store_and_advertise_the_nodes_address():
    from islab.plan.torchrun import with_c10d_node_facts

    plan = plan_for(device="cpu", nnodes=2, rendezvous__backend="c10d", rendezvous__endpoint="10.0.0.1:29400")
    hosting = with_c10d_node_facts(plan, 0, hosts_store=True, local_addr="10.0.0.1")
    config = torchrun_config(hosting.node(0).argv)
    assert config.rdzv_configs["is_host"] in ("1", 1, True)
    assert "join_timeout" not in config.rdzv_configs  # torch's own 600 s
    assert config.local_addr == "10.0.0.1"
    assert torchrun_args(hosting.node(0).argv).module  # still runs -m islab.worker
    other = with_c10d_node_facts(plan, 1, hosts_store=False, local_addr="10.0.0.2")
    config = torchrun_config(other.node(1).argv)
    assert "is_host" not in config.rdzv_configs and config.local_addr == "10.0.0.2"
    static = plan_for(device="cpu", nnodes=2, rendezvous__master_addr="10.0.0.1")
    assert with_c10d_node_facts(static, 0, hosts_store=True, local_addr="10.0.0.1") is static


def test_resume_checkpoint_interval_and_peer_timeout_reach_the_worker(tmp_path):
    run_dir = tmp_path / "logs" / "rsl_rl" / "Islab-Cartpole-v0" / "2026-01-01_00-00-00"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest.pt").write_bytes(b"not read by the planner")
    plan = plan_for(device="cpu", nproc_per_node=2, resume=str(run_dir), checkpoint_interval=3)
    worker = check_worker(torchrun_args(plan.nodes[0].argv).training_script_args, checkpoint_interval=3)
    assert worker.resume == run_dir and worker.peer_timeout == 900
    # resuming a run directory continues in it: logs, TensorBoard and checkpoints stay together
    assert plan.run_dir == str(run_dir)
    checkpoint_file = run_dir / "checkpoints" / "latest.pt"
    assert plan_for(device="cpu", nproc_per_node=2, resume=str(checkpoint_file)).run_dir != str(run_dir)


# ----------------------------------------------------------------------------------------------
# --total-env-steps: the worker gets the budget, the dry run shows what it means
# ----------------------------------------------------------------------------------------------


def test_torchrun_workers_get_the_budget_instead_of_iterations():
    plan = plan_for(device="cpu", nproc_per_node=2, num_envs=1024, total_env_steps=1_000_000)
    worker_argv = torchrun_args(plan.nodes[0].argv).training_script_args
    assert "--max-iterations" not in worker_argv
    assert worker_argv[worker_argv.index("--total-env-steps") + 1] == "1000000"
    check_worker(worker_argv, total_env_steps=1_000_000, max_iterations=None, num_envs=1024)
    # without a budget, nothing changes
    worker_argv = torchrun_args(plan_for(device="cpu", max_iterations=7).nodes[0].argv).training_script_args
    assert "--total-env-steps" not in worker_argv
    check_worker(worker_argv, max_iterations=7, total_env_steps=None)


def test_jax_workers_get_the_budget_on_every_path(monkeypatch):
    spec = resolved(
        lib="skrl", ml_framework="jax", nnodes=2, coordinator_address="10.0.0.1:5000", total_env_steps=500_000
    ).spec
    plan = build_plan(spec, now=NOW, free_port=FREE_PORT)
    for node in plan.nodes:
        check_worker(jax_launcher_args(node.argv).script_args, total_env_steps=500_000, max_iterations=None)
        for rank in node.ranks:  # what a real launch starts itself
            check_worker(list(rank.argv[2:]), total_env_steps=500_000, max_iterations=None)


def test_dry_run_shows_the_budget_with_the_overridden_rollout():
    res = resolved(
        device="cpu", nproc_per_node=2, num_envs=1024, total_env_steps=1_000_000, overrides=("num_steps_per_env=8",)
    )
    plan = build_plan(res.spec, now=NOW, free_port=FREE_PORT)
    text = format_text(plan, res)
    assert (
        "# budget: --total-env-steps 1000000 = 62 iterations × 2 ranks × 1024 envs × 8 steps (1015808 env steps)\n"
        in text
    )
    assert "max_iterations         = -  (source: default, derived from total_env_steps by each run)" in text
    assert "total_env_steps        = 1000000  (source: cli, --total_env_steps)" in text
    budget = json.loads(format_json(plan))["budget"]
    assert (budget["iterations"], budget["world_size"], budget["rollout_length"]) == (62, 2, 8)
    assert budget["env_steps"] == 1015808 >= budget["total_env_steps"] == 1_000_000
    assert budget["max_iterations"] is None


def test_the_planner_counts_the_rollout_length_resolution_read_and_reads_no_agent_config():
    spec = resolved(device="cpu", nproc_per_node=2).spec
    assert spec.rollout_length == 16  # rsl_rl's num_steps_per_env in Cartpole's agent config, read by the edge
    assert plan_budget(spec).rollout_length == 16
    assert plan_budget(spec.with_rollout_length(5)).rollout_length == 5  # the value handed in, not the file's
    assert plan_budget(spec.model_copy(update={"lib": "skrl"})).rollout_length == 16  # not re-read (skrl: 32)
    assert RunSpec.model_validate(spec.model_dump()).rollout_length is None  # not an input: no dump carries it
    assert plan_budget(RunSpec.model_validate(spec.model_dump())) is None  # built in code: no budget


def plan_budget(spec: RunSpec) -> Budget | None:
    return build_plan(spec, now=NOW, free_port=FREE_PORT).budget


def test_dry_run_of_an_elastic_job_leaves_the_iterations_to_the_run():
    res = resolved(
        nnodes="1:2", nproc_per_node=2, num_envs=1024, rendezvous__backend="c10d",
        rendezvous__endpoint="10.0.0.1:29400", total_env_steps=1_000_000,
    )  # fmt: skip
    plan = build_plan(res.spec, now=NOW, free_port=FREE_PORT)
    budget = json.loads(format_json(plan))["budget"]
    assert budget["iterations"] is None and budget["world_size"] is None and budget["env_steps"] is None
    assert budget["world_size_range"] == [2, 4]
    line = next(line for line in format_text(plan, res).splitlines() if line.startswith("# budget:"))
    assert "31 iterations × 2 ranks" in line and "16 iterations × 4 ranks" in line


def test_torchrun_ranks_get_omp_threads_cores_over_n(monkeypatch):
    """torchrun's OMP_NUM_THREADS banner goes and the value matches the worker's cores // N."""
    from islab.plan.torchrun import ranks_env
    from islab.run.torchrun_node import TorchrunNode

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert ranks_env({}, 2, cores=8)["OMP_NUM_THREADS"] == "4"
    assert ranks_env({}, 4, cores=2)["OMP_NUM_THREADS"] == "1"
    assert ranks_env({"OMP_NUM_THREADS": "3"}, 2, cores=8)["OMP_NUM_THREADS"] == "3"
    plan = plan_for(lib="rsl_rl", device="cpu", nproc_per_node=2)
    child = TorchrunNode(plan, plan.nodes[0]).children()[0]
    assert child.env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))


def test_ipv6_reaches_torchrun_intact_and_is_refused_for_skrl_jax(islab):
    """torchrun parses [v6]:port (c10d endpoint) and a bare v6 master address; skrl's JAX launcher
    splits on ':' (issue 14 item 2), so a bracketed coordinator is refused before launch."""
    c10d = plan_for(
        lib="rsl_rl", device="cpu", nproc_per_node=2, rendezvous={"backend": "c10d", "endpoint": "[::1]:29400"}
    )
    assert torchrun_args(c10d.nodes[0].argv).rdzv_endpoint == "[::1]:29400"
    static = plan_for(lib="rsl_rl", device="cpu", nnodes=2, node_rank=1, rendezvous={"master_addr": "::1"})
    assert torchrun_args(static.nodes[0].argv).master_addr == "::1"
    code, out, err = islab("--lib", "skrl", "--ml-framework", "jax", "--device", "cpu", "--dry-run",
                           "--coordinator-address", "[::1]:12351")  # fmt: skip
    assert code == 2 and out == "" and err.startswith("error: coordinator_address") and "IPv6" in err


# ----------------------------------------------------------------------------------------------
# The launch decided once: the scheduler job, the whole launch (islab.plan.launch)
# ----------------------------------------------------------------------------------------------

# A SLURM step on the second of three nodes (as tests/plan/test_dry_run_golden.py fakes one).
SRUN = {
    "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_NNODES": "3", "SLURM_STEP_NUM_NODES": "3",
    "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-02],cpu7", "SLURM_STEP_NODELIST": "gpu[01-02],cpu7",
}  # fmt: skip


def resolved_under(environ: dict[str, str], **values: object) -> ResolvedSpec:
    """``values`` resolved inside the allocation ``environ`` describes (read as the CLI reads it)."""
    from islab.resolve.allocations import active_allocations

    layer = {name.replace("__", "."): Provided(value, f"--{name}") for name, value in values.items()}
    layer.setdefault("python", Provided("/opt/py/bin/python", "--python"))
    return resolve_spec(layer, allocations=active_allocations({}, environ))


@pytest.mark.parametrize("restarts", [None, "0", "2"])
def test_a_slurm_job_is_decided_once_and_its_ranks_are_told(restarts: str | None) -> None:
    """The allocation names the job once: the run directory slurm-<id>, and the ranks get the job and
    (on a requeue) why this start continues it as arguments -- they read no SLURM variable."""
    environ = {**SRUN, **({"SLURM_RESTART_COUNT": restarts} if restarts is not None else {})}
    spec = resolved_under(environ, device="cpu", nproc_per_node=2)
    requeue = f"SLURM requeue {restarts}" if restarts not in (None, "0") else None
    assert (spec.job.scheduler, spec.job.run_leaf, spec.job.restart) == ("slurm", "slurm-123456", requeue)
    from islab.plan.launch import LaunchFacts, plan_launch

    launch = plan_launch(spec, LaunchFacts(NOW, FREE_PORT))
    assert launch.plan.run_dir.endswith("/slurm-123456") and launch.dns_host is None
    worker = check_worker(list(torchrun_args(launch.plan.node(1).argv).training_script_args))
    assert (worker.scheduler_job, worker.job_restart) == ("slurm-123456", requeue)


def test_without_a_scheduler_job_the_ranks_hear_of_none() -> None:
    spec = resolved_under({}, device="cpu", nproc_per_node=2)
    argv = build_plan(spec.spec, now=NOW, free_port=FREE_PORT, job=spec.job).node(0).argv
    assert spec.job is None and "--scheduler-job" not in argv and "--job-restart" not in argv


def test_a_kubernetes_job_waits_for_node_0s_name_and_warns_of_cameras_in_the_launch() -> None:
    """What the CLI once added after planning comes with the launch: the DNS name a Kubernetes job's
    nodes wait for (node 0's pod), the camera warning, the NCCL settings under the inherited ones."""
    from islab.plan.launch import LaunchFacts, plan_launch
    from islab.resolve.job import JobIdentity

    pods = resolved(device="cpu", nnodes=2, node_rank=1, rendezvous__master_addr="sim-0.sim.default.svc")
    job = JobIdentity("k8s", "k8s-sim", restart="Kubernetes job sim started again", waits_for_dns=True)
    launch = plan_launch(ResolvedSpec(pods.spec, pods.sources, job=job), LaunchFacts(NOW, FREE_PORT))
    assert launch.dns_host == "sim-0.sim.default.svc" and launch.plan.run_dir.endswith("/k8s-sim")
    assert plan_launch(pods, LaunchFacts(NOW, FREE_PORT)).dns_host is None  # no job: nothing to wait for

    script = resolved(device="cuda", nproc_per_node=2, entrypoint={"script": "train.py"}, args=("--enable_cameras",))
    safe = plan_launch(script, LaunchFacts(NOW, FREE_PORT, {"NCCL_ALGO": "Tree"}, nccl_safe=True))
    assert len(safe.warnings) == 1 and "cameras are enabled" in safe.warnings[0]
    env = safe.plan.node(0).env
    assert env["NCCL_SHM_DISABLE"] == "1" and "NCCL_ALGO" not in env  # the user's own value wins
