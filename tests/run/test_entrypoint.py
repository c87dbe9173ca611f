"""Any entry point (issue 10 §1): --script / --module / --command, everything after `--`
verbatim, YAML `entrypoint:` + `args:`, worker-only options refused, ISLAB_RUN_DIR for every rank,
the look-alike-dash hint (issue 14 item 4), and a real 2-rank launch of a plain DDP script."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env
from cli_results import dry_run_json as _json
from cli_results import one_error as _error
from paths import FIXTURES

DDP = FIXTURES / "ddp_finetune.py"
CPU2 = ("--device", "cpu", "--nproc", "2")
PORT = ("--master-port", "29999")  # fixed, so the text and JSON dry runs print the same command


@pytest.mark.usefixtures("clean_environment")
def test_entry_points_dry_run_json_and_text_agree(islab, tmp_path):
    weird = ["--task=Isaac-Cartpole-v0", "a b", "–distributed", "$(touch x)", "--num-envs", "7"]
    log_dir = str(tmp_path / "L")
    for flag, name, head in (
        ("--script", "train.py", ["train.py"]),
        ("--module", "pkg.train", ["-m", "pkg.train"]),
        ("--command", "train", ["--no-python", "train"]),
    ):
        plan = _json(islab, *CPU2, *PORT, "--log-dir", log_dir, flag, name, "--", *weird)
        node = plan["nodes"][0]
        argv = node["argv"]
        # torchrun's own options, then the entry point and its arguments verbatim (no -m islab.worker)
        assert argv[1:3] == ["-m", "torch.distributed.run"] and "islab.worker" not in argv
        assert argv[-len(head) - len(weird) :] == [*head, *weird], argv
        assert node["env"]["ISLAB_RUN_DIR"].startswith(log_dir), node["env"]
        assert plan["budget"] is None
        code, out, err = islab(*CPU2, *PORT, "--log-dir", log_dir, flag, name, "--dry-run", "--", *weird)
        assert code == 0, err
        command = [line for line in out.splitlines() if not line.startswith("#")]
        tokens = shlex.split(command[0])
        assert tokens[tokens.index(sys.executable) :] == argv  # the printed text is the same command
        assert "num_envs" not in out and "entrypoint" in out  # worker fields are not shown for a script
    assert not (tmp_path / "L").exists()


@pytest.mark.usefixtures("clean_environment")
def test_yaml_entrypoint_args_and_cli_args_replace_them(islab, tmp_path):
    cluster = tmp_path / "byo.yaml"
    cluster.write_text("device: cpu\nnproc_per_node: 2\nentrypoint: {script: finetune.py}\nargs: [--steps, '3']\n")
    argv = _json(islab, "--cluster", str(cluster))["nodes"][0]["argv"]
    assert argv[-3:] == ["finetune.py", "--steps", "3"]
    argv = _json(islab, "--cluster", str(cluster), "--", "--lr", "0.1")["nodes"][0]["argv"]
    assert argv[-3:] == ["finetune.py", "--lr", "0.1"]  # `--` replaces the YAML args
    argv = _json(islab, "--cluster", str(cluster), "--module", "m")["nodes"][0]["argv"]
    assert argv[-4:] == ["-m", "m", "--steps", "3"]  # the command line's entry point wins
    cluster.write_text("device: cpu\nentrypoint: {script: a.py, module: b}\n")
    _error(islab("--cluster", str(cluster), "--dry-run"), "byo.yaml: entrypoint")


@pytest.mark.usefixtures("clean_environment")
def test_worker_only_options_and_impossible_entry_points_are_refused(islab):
    for option in (("--num-envs", "8"), ("--max-iterations", "3"), ("--task", "Islab-Cartpole-v0")):
        _error(islab(*CPU2, "--script", "t.py", *option, "--dry-run"), option[0])
    _error(islab(*CPU2, "--script", "t.py", "algorithm.lr=1", "--dry-run"), "KEY=VALUE")
    _error(islab(*CPU2, "--script", "t.py", "--module", "m", "--dry-run"), "--script / --module")
    _error(
        islab("--lib", "skrl", "--ml-framework", "jax", *CPU2, "--module", "m", "--dry-run"), "entrypoint (--module)"
    )


@pytest.mark.usefixtures("clean_environment")
def test_skrl_jax_with_a_script_uses_skrls_launcher(islab):
    plan = _json(islab, "--lib", "skrl", "--ml-framework", "jax", *CPU2, "--script", "train.py", "--", "--x", "1")
    argv = plan["nodes"][0]["argv"]
    assert plan["launcher"] == "skrl-jax"
    assert argv[1:3] == ["-m", "skrl.utils.distributed.jax"] and argv[-3:] == ["train.py", "--x", "1"]
    assert "ISLAB_RUN_DIR" in plan["nodes"][0]["env"]


@pytest.mark.usefixtures("clean_environment")
def test_lookalike_dash_hint_names_only_real_options(islab):
    err = _error(islab("--lib", "rl_games", "--gpus", "1", "\u2013distributed", "--dry-run"), "argument")
    assert "did you mean" not in err and "after --" in err and "--isaaclab" in err
    err = _error(islab("\u2013headless", "--dry-run"), "argument")
    assert "did you mean" not in err and "after --" in err
    err = _error(islab("\u2013nproc", "2", "--dry-run"), "argument")
    assert "did you mean --nproc?" in err
    err = _error(islab("\u2014frobnicate", "--dry-run"), "argument")
    assert "did you mean" not in err and "no option --frobnicate" in err


def _launch(tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = child_env(("ISLAB_", "SLURM_"))
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", "islab.cli", *CPU2, "--log-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_script_runs_on_two_cpu_ranks_with_rank_logs_and_a_named_failing_rank(tmp_path):
    ok = _launch(tmp_path, "--run-name", "ok", "--script", str(DDP), "--", "--steps", "3", "--device", "cpu")
    assert ok.returncode == 0, ok.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / "script" / "ddp_finetune").glob("*_ok")
    assert (run_dir / "finetune.pt").is_file()  # rank 0 wrote where ISLAB_RUN_DIR pointed
    for rank in (0, 1):  # the launcher wrote each rank's log, attributed by rank (the script does not)
        assert f"rank {rank} done: world 2 digest" in (run_dir / "logs" / f"rank_{rank}.log").read_text()
    assert "step 3/3" in (run_dir / "logs" / "rank_0.log").read_text()

    bad = _launch(tmp_path, "--run-name", "bad", "--script", str(DDP), "--", "--steps", "3", "--device", "cpu",
                  extra_env={"FIXTURE_FAIL_RANK": "1"})  # fmt: skip
    assert bad.returncode != 0
    error = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert error and "rank 1 with RuntimeError: fixture failure injected on rank 1" in error[-1], bad.stderr[-3000:]
    assert "rank_1.log" in error[-1]


TREE = FIXTURES / "isaaclab_tree"
RSL_TRAIN = TREE / "scripts" / "reinforcement_learning" / "rsl_rl" / "train.py"


@pytest.mark.usefixtures("clean_environment")
def test_isaaclab_preset_maps_options_and_refuses_what_cannot_run(islab, tmp_path, monkeypatch):
    argv = _json(islab, "--gpus", "2", "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0", "--num-envs", "16",
                 "--seed", "3", "--max-iterations", "2", "--", "--video")["nodes"][0]["argv"]  # fmt: skip
    assert argv[argv.index(str(RSL_TRAIN)) :] == [
        str(RSL_TRAIN), "--task", "Isaac-Cartpole-v0", "--num_envs", "16", "--seed", "3", "--max_iterations", "2",
        "--headless", "--distributed", "--video",
    ]  # fmt: skip
    # one CPU rank: --device cpu and no --distributed (which would move train.py to cuda:0); several: refused
    argv = _json(islab, "--device", "cpu", "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0")["nodes"][0]["argv"]
    assert argv[argv.index(str(RSL_TRAIN)) :] == [str(RSL_TRAIN), "--task", "Isaac-Cartpole-v0", "--headless",
                                                  "--device", "cpu"]  # fmt: skip
    assert "cuda:<local rank>" in _error(islab(*CPU2, "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0",
                                               "--dry-run"), "--device")  # fmt: skip
    monkeypatch.setenv("ISLAB_ISAACLAB", str(TREE))  # the environment variable and the YAML key work too
    assert str(RSL_TRAIN) in _json(islab, "--device", "cpu", "--task", "Isaac-Cartpole-v0")["nodes"][0]["argv"]
    monkeypatch.delenv("ISLAB_ISAACLAB")
    cluster = tmp_path / "il.yaml"
    cluster.write_text(f"device: cpu\nisaaclab: {TREE}\ntask: Isaac-Cartpole-v0\n")
    assert str(RSL_TRAIN) in _json(islab, "--cluster", str(cluster))["nodes"][0]["argv"]
    err = _error(islab(*CPU2, "--isaaclab", str(TREE), "--task", "Isaac-Cartpol-v0", "--dry-run"), "--task")
    assert "Did you mean Isaac-Cartpole-v0?" in err
    _error(islab(*CPU2, "--isaaclab", str(TREE), "--dry-run"), "task")
    _error(islab(*CPU2, "--isaaclab", str(tmp_path), "--task", "X"), "--isaaclab")  # a real launch checks the tree
    # a dry run plans without a checkout here (issue 23 item 12), in one warning line
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # no GPU-count warning besides
    code, out, err = islab("--gpus", "2", "--isaaclab", str(tmp_path), "--task", "Isaac-Cartpole-v0", "--dry-run")
    assert code == 0 and "train.py --task Isaac-Cartpole-v0 --headless --distributed" in out, err
    assert err.startswith("warning: --isaaclab:") and len(err.strip().splitlines()) == 1, err
    _error(islab("--gpus", "2", "--isaaclab", str(tmp_path), "--task", "X", "--ml-framework", "jax", "--dry-run"),
           "--isaaclab")  # fmt: skip  # what no checkout could run is still refused
    _error(islab(*CPU2, "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0", "--script", "a.py", "--dry-run"),
           "--isaaclab")  # fmt: skip


@pytest.mark.slow
def test_isaaclab_fixture_trains_on_two_ranks_shows_its_reward_and_names_a_failing_rank(tmp_path):
    # one CPU rank: Isaac Lab's train.py cannot run several on CPU (several: the --script run below)
    ok = _launch_one(tmp_path, "--device", "cpu", "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0",
                     "--num-envs", "16", "--max-iterations", "3", extra_env={})  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-3000:]
    # the display and the summary show the reward read from rsl_rl's TensorBoard events (cwd/logs/rsl_rl)
    assert "iteration 3/" in ok.stdout and "mean return" in ok.stdout, ok.stdout
    row = next(line for line in ok.stdout.splitlines() if "mean return" in line and "iteration" not in line)
    float(row.split("│")[2].strip())  # a number, not "-"
    assert any((tmp_path / "runs").rglob("curves.png"))

    script = ("--script", str(RSL_TRAIN), "--", "--task", "Isaac-Cartpole-v0", "--num_envs", "16",
              "--max_iterations", "3", "--headless", "--distributed", "--device", "cpu")  # fmt: skip
    bad = _launch(tmp_path, *script, extra_env={"FIXTURE_FAIL_RANK": "1"})
    assert bad.returncode != 0
    error = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert error and "rank 1 with RuntimeError: fixture failure injected on rank 1" in error[-1], bad.stderr[-3000:]


@pytest.mark.usefixtures("clean_environment")
def test_mjlab_preset_maps_options_to_mjlab_train(islab):
    mj = ("--mjlab", "--task", "Mjlab-Cartpole-Balance", "--num-envs", "8", "--max-iterations", "2", "--seed", "5")
    argv = _json(islab, "--device", "cpu", *mj)["nodes"][0]["argv"]
    assert argv[argv.index("--nproc_per_node") + 1] == "1"  # mjlab spawns its own ranks
    assert argv[argv.index("--no-python") :] == [
        "--no-python", "train", "Mjlab-Cartpole-Balance", "--gpu-ids", "None", "--env.scene.num-envs", "8",
        "--agent.max-iterations", "2", "--agent.seed", "5", "--agent.logger", "tensorboard",
    ]  # fmt: skip
    code, out, err = islab("--dry-run", "--json", "--gpus", "2", *mj, "--", "--agent.logger", "wandb")
    assert code == 0, err
    argv = json.loads(out)["nodes"][0]["argv"]
    assert argv[argv.index("--gpu-ids") + 1] == "[0,1]" and argv[argv.index("--nproc_per_node") + 1] == "1"
    assert argv.count("--agent.logger") == 1 and argv[-1] == "wandb"  # the user's logger is kept
    _error(islab("--device", "cpu", *mj, "--nnodes", "2", "--dry-run"), "--mjlab")


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("mjlab") is None and os.environ.get("ISLAB_TEST_JOB") != "mjlab",
    reason="needs the [mjlab] extra (CI's mjlab job installs it and fails without it)",
)
def test_mjlab_cartpole_trains_for_real_and_shows_its_reward(tmp_path):
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = _launch_one(tmp_path, "--mjlab", "--task", "Mjlab-Cartpole-Balance", "--device", "cpu", "--num-envs", "64",
                      "--max-iterations", "2", extra_env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "iteration 2/" in run.stdout, run.stdout
    # the reward mjlab's own train wrote to its TensorBoard events, shown as a number
    assert re.search(r"mean return -?\d+\.\d+", run.stdout), run.stdout


def _launch_one(tmp_path: Path, *args: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = child_env(("ISLAB_", "SLURM_")) | extra_env
    cmd = [sys.executable, "-m", "islab.cli", "--log-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900)


def test_a_rank_that_only_lost_its_peer_is_not_the_root_cause(tmp_path):
    """Error files stamped in the same second: the rank with its own exception is named first."""
    from islab.run.torchrun_node import error_file_failures

    for rank, message in ((0, "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:9344"),
                          (1, "RuntimeError: fixture failure injected on rank 1")):  # fmt: skip
        path = tmp_path / "run" / "attempt_0" / str(rank) / "error.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"message": {"message": message, "extraInfo": {"timestamp": "1795474576"}}}))
    assert [rank for rank, _ in error_file_failures(tmp_path)] == [1, 0]
