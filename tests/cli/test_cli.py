"""The islab-train command line, run in-process (fast) except where a fresh interpreter matters."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from child_env import child_env
from paths import REPO

WORKER_MAIN = REPO / "src" / "islab" / "worker" / "__main__.py"

pytestmark = pytest.mark.usefixtures("clean_environment")


def dry_json(islab, *args: str) -> dict:
    code, out, err = islab(*args, "--dry-run", "--json")
    assert code == 0, err
    return json.loads(out)


def assert_usage_error(result: tuple[int, str, str], *fragments: str) -> str:
    code, out, err = result
    assert code == 2, (out, err)
    assert err.startswith("error: "), err
    assert "Traceback" not in err and "validation error" not in err
    for fragment in fragments:
        assert fragment in err, err
    return err


# ----------------------------------------------------------------------------------------------
# Dry runs
# ----------------------------------------------------------------------------------------------


def test_dry_run_text_prints_commands_and_creates_nothing(islab, tmp_path):
    code, out, err = islab(
        "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--log-dir", str(tmp_path / "L"), "--dry-run"
    )
    assert code == 0, err
    assert "# node 0" in out
    command = [line for line in out.splitlines() if not line.startswith("#")]
    assert len(command) == 1
    tokens = shlex.split(command[0])
    assert tokens[0] == "GIT_PYTHON_REFRESH=quiet"
    assert tokens[1:4] == [sys.executable, "-m", "torch.distributed.run"]
    assert not (tmp_path / "L").exists()
    assert err == ""  # CPU plan: no GPU warning


def test_dry_run_json_for_gpus_without_gpus_warns_once(islab):
    code, out, err = islab("--lib", "skrl", "--ml-framework", "jax", "--gpus", "2", "--dry-run", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["launcher"] == "skrl-jax"
    assert data["nodes"][0]["argv"][1:3] == ["-m", "skrl.utils.distributed.jax"]
    assert len(err.strip().splitlines()) == 1 and err.startswith("warning:")


def test_gpus_all_counts_cuda_visible_devices(islab, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    argv = dry_json(islab, "--gpus", "all")["nodes"][0]["argv"]
    assert argv[argv.index("--nproc_per_node") + 1] == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    # a dry run plans GPU jobs anywhere (issue 23 item 12): 'all' is 1 GPU per node, said in one warning
    code, out, err = islab("--gpus", "all", "--dry-run", "--json")
    assert code == 0, err
    argv = json.loads(out)["nodes"][0]["argv"]
    assert argv[argv.index("--nproc_per_node") + 1] == "1"
    assert len(err.strip().splitlines()) == 1 and err.startswith("warning: --gpus all:") and "1 GPU per node" in err
    assert_usage_error(islab("--gpus", "all"), "--gpus", "--device cpu --nproc N")  # a real launch is refused


def test_precedence_and_sources(islab, tmp_path, monkeypatch):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("num_envs: 32\nseed: 7\nmax_iterations: 9\ndevice: cpu\n")
    monkeypatch.setenv("ISLAB_NUM_ENVS", "64")
    monkeypatch.setenv("ISLAB_SEED", "8")
    argv = dry_json(islab, "--cluster", str(cluster), "--num-envs", "16")["nodes"][0]["argv"]
    assert argv[argv.index("--num-envs") + 1] == "16"
    assert argv[argv.index("--seed") + 1] == "8"
    assert argv[argv.index("--max-iterations") + 1] == "9"
    code, out, _ = islab("--cluster", str(cluster), "--num-envs", "16", "--dry-run")
    assert code == 0
    explained = {line.split("=")[0].strip("# ").strip(): line for line in out.splitlines() if line.startswith("#   ")}
    assert "(source: cli, --num-envs)" in explained["num_envs"]
    assert "(source: env, ISLAB_SEED)" in explained["seed"]
    assert "(source: file)" in explained["max_iterations"]
    assert "(source: default)" in explained["nnodes"]


def test_env_variables_for_options(islab, monkeypatch):
    monkeypatch.setenv("ISLAB_LIB", "rl_games")
    monkeypatch.setenv("ISLAB_DEVICE", "cpu")
    monkeypatch.setenv("ISLAB_NPROC", "2")
    argv = dry_json(islab)["nodes"][0]["argv"]
    assert argv[argv.index("--lib") + 1] == "rl_games"
    assert argv[argv.index("--device") + 1] == "cpu"


def test_total_env_steps_from_the_command_line_and_the_environment(islab, monkeypatch, tmp_path):
    monkeypatch.setenv("ISLAB_TOTAL_ENV_STEPS", "300000")
    data = dry_json(islab, "--lib", "rl_games", "--device", "cpu", "--nproc", "2", "--num-envs", "512")
    argv = data["nodes"][0]["argv"]
    assert argv[argv.index("--total-env-steps") + 1] == "300000" and "--max-iterations" not in argv
    assert data["budget"]["iterations"] == 19  # ceil(300000 / (2 x 512 x horizon_length 16))
    argv = dry_json(islab, "--device", "cpu", "--total-env-steps", "1000")["nodes"][0]["argv"]
    assert argv[argv.index("--total-env-steps") + 1] == "1000"  # the command line wins
    argv = dry_json(islab, "--device", "cpu", "--max-iterations", "5")["nodes"][0]["argv"]
    assert argv[argv.index("--max-iterations") + 1] == "5" and "--total-env-steps" not in argv  # so does this
    code, out, err = islab("--device", "cpu", "--max-iterations", "5", "--total-env-steps", "1000", "--dry-run")
    assert code == 2 and out == ""
    assert err.startswith("error: total_env_steps (--total-env-steps): ") and "(given by --max-iterations)" in err
    assert len(err.strip().splitlines()) == 1


def test_total_env_steps_reaches_sbatch_nodes(islab, tmp_path):
    code, out, err = islab(
        "sbatch", "--device", "cpu", "--nproc", "2", "--total-env-steps", "5000", "--log-dir", str(tmp_path / "L")
    )
    assert code == 0, err
    node_command = out.strip().splitlines()[-1]  # `exec srun ... \` then the node's islab-train
    assert "--slurm" in node_command and "--total-env-steps 5000" in node_command


def test_multinode_without_node_rank_dry_runs_every_node(islab, tmp_path):
    data = dry_json(islab, "--cluster", str(REPO / "configs/cluster/two-node-static.yaml"))
    assert [node["node_rank"] for node in data["nodes"]] == [0, 1]
    one = dry_json(islab, "--cluster", str(REPO / "configs/cluster/two-node-static.yaml"), "--node-rank", "1")
    assert [node["node_rank"] for node in one["nodes"]] == [1]


@pytest.mark.parametrize("name", ["workstation", "two-node-static", "two-node-c10d", "cpu"])
def test_shipped_cluster_examples_are_valid(islab, name):
    dry_json(islab, "--cluster", str(REPO / f"configs/cluster/{name}.yaml"))


def test_secrets_are_masked_in_every_printed_output(islab, tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("device: cpu\nenv: {WANDB_API_KEY: hunter2, GH_TOKEN: t0k3n}\n")
    code, out, _ = islab("--cluster", str(cluster), "--dry-run")
    assert code == 0
    assert "hunter2" not in out and "t0k3n" not in out
    assert "WANDB_API_KEY='****'" in out
    code, out, _ = islab("--cluster", str(cluster), "--dry-run", "--json")
    assert code == 0 and "hunter2" not in out and json.loads(out)["nodes"][0]["env"]["GH_TOKEN"] == "****"


def test_overrides_and_hostile_log_dir_survive_quoting(islab):
    hostile = "my logs/$(touch pwned)"
    code, out, _ = islab(
        "--device", "cpu", "--log-dir", hostile, "--dry-run", "algorithm.learning_rate=1e-3", "+a.b=x y"
    )
    assert code == 0
    (line,) = [line for line in out.splitlines() if not line.startswith("#")]
    tokens = shlex.split(line)
    assert tokens[-2:] == ["algorithm.learning_rate=1e-3", "+a.b=x y"]
    assert any(token.startswith(f"{hostile}/rsl_rl/") for token in tokens)


def test_help_is_grouped_with_examples(islab):
    code, out, _ = islab("--help")
    assert code == 0
    for text in ("Training", "Processes on this node", "Cluster", "Examples", "ISLAB_NUM_ENVS", "--dry-run",
                 "--install-completion", "PER RUN"):  # fmt: skip
        assert text in out, text


# ----------------------------------------------------------------------------------------------
# Errors: one line, exit 2, nothing started
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["–distributed"], ["flag of Isaac Lab's train.py", "after --"]),  # issue 14.4: no hint at a missing option
        (["—num-envs", "3"], ["did you mean --num-envs?"]),
        (["--lib", "rsl"], ["--lib", "did you mean 'rsl_rl'?"]),
        (["--device", "gpu"], ["did you mean 'cuda'?"]),
        (["--num-envs", "abc"], ["--num-envs", "whole number"]),
        (["--num-envs", "0"], ["num_envs", "at least 1"]),
        (["--nproc", "0", "--device", "cpu"], ["nproc_per_node", "at least 1"]),
        (["--master-port", "70000"], ["master_port", "1–65535"]),
        (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"], ["node_rank", "outside [0, 2)"]),
        (["--nnodes", "2"], ["master_addr", "--master-addr"]),
        (["--nnodes", "2", "--rdzv-backend", "c10d"], ["--rdzv-endpoint"]),
        (["--lib", "rl_games", "--ml-framework", "jax"], ["jax only works with skrl"]),
        (["--lib", "skrl", "--ml-framework", "jax", "--rdzv-backend", "c10d"], ["torchrun option"]),
        (["--lib", "skrl", "--ml-framework", "jax", "--max-restarts", "1"], ["torchrun option"]),
        (["--coordinator-address", "h:1"], ["only applies to skrl with JAX"]),
        (["--task", "Islab-Cartpole"], ["did you mean 'Islab-Cartpole-v0'?"]),
        (["--run-name", "x; rm -rf /"], ["run_name"]),
        (["--run-name", "a\nb"], ["run_name"]),
        (["--master-addr", "$(reboot)"], ["master_addr", "not a valid host"]),
        (["--gpus", "two"], ["--gpus", "number or 'all'"]),
        (["--gpus", "2", "--device", "cpu"], ["--gpus", "not both"]),
        (["--gpus", "2", "--nproc", "2"], ["--gpus", "Give only one"]),
        (["novalue"], ["is not key=value"]),
        (["doctr"], ["command 'doctr'", "did you mean 'doctor'?"]),
        (["hlep"], ["command 'hlep'", "did you mean 'help'?"]),  # issue 30 item 6: help-like words
        (["-help"], ["command '-help'", "run 'islab-train --help'"]),
        (["usage"], ["command 'usage'", "run 'islab-train --help'"]),
        (["version"], ["command 'version'", "did you mean 'islab-train --version'?"]),
        (["verison"], ["did you mean '--version'?"]),
        (
            ["--task-module", "no_such_tasks_mod"],
            ["task_module", "not installed and not in the working directory"],
        ),  # a typo of a subcommand, not an override
        (["plya", "logs/x"], ["did you mean 'play'?"]),
        (["--json"], ["--json", "--dry-run"]),
        (["--cluster", "/does/not/exist.yaml"], ["does not exist"]),
        (["--nmu-envs", "3"], ["--num-envs"]),
    ],
)
def test_usage_errors(islab, args, fragments):
    err = assert_usage_error(islab(*args, "--dry-run") if "--json" not in args else islab(*args), *fragments)
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["play", "export", "eval"])
def test_play_and_export_without_a_run_directory_say_it_is_missing(islab, command):
    err = assert_usage_error(islab(command), "RUN_DIR: the run directory is missing", f"islab-train {command} logs/")
    assert len(err.strip().splitlines()) == 1


def test_version_is_one_line_with_torchs_and_the_libraries_versions(islab):
    """Issue 30 item 6: ``--version`` / ``-V`` (also after other options): name, version, Python,
    torch and every library's version on one line, read from the installed metadata."""
    import importlib.metadata
    import platform

    from islab import __version__

    for args in (["--version"], ["-V"], ["--lib", "rsl_rl", "-V"]):
        code, out, err = islab(*args)
        assert code == 0 and err == "" and out.count("\n") == 1, (args, out, err)
        assert out.startswith(f"islab-train {__version__} (Python {platform.python_version()}; "), out
        for name in ("torch", "rsl-rl-lib", "rl-games", "skrl"):
            assert f"{name} {importlib.metadata.version(name)}" in out, (name, out)


def test_a_plain_launch_on_a_machine_without_gpus_says_cuda_is_the_default(islab, clean_environment, tmp_path):
    """Issue 30 item 8: a bare ``islab-train`` said "cuda was asked for" though nothing was asked. It
    says cuda is the default and gives the CPU spelling; an explicit --device cuda keeps its words."""
    code, out, err = islab("--log-dir", str(tmp_path))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: device: cuda is the default device (no --device or --gpus was given)"), err
    assert "give --device cpu --nproc N" in err and "asked for" not in err
    code, _out, err = islab("--device", "cuda", "--log-dir", str(tmp_path))
    assert code == 2 and "cuda was asked for" in err, err
    assert list(tmp_path.iterdir()) == []  # nothing launched, no run directory


def test_help_as_a_word_is_help(islab):
    """Issue 30 item 6: ``islab-train help`` is ``--help``; ``help COMMAND`` is ``COMMAND --help``."""
    assert islab("help") == islab("--help") and "Usage: islab-train [OPTIONS]" in islab("help")[1]
    assert islab("help", "doctor") == islab("doctor", "--help") and "islab-train doctor" in islab("help", "doctor")[1]


def test_help_lists_every_subcommand(islab):
    from islab.cli.app import SUBCOMMANDS

    _, out, _ = islab("--help")
    listed = " ".join(out.split()).split("Commands: ", 1)[1].split("(each has")[0]
    assert listed.replace("islab-train", "").replace("|", " ").split() == list(SUBCOMMANDS)


def test_bad_cluster_files(islab, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lib: rsl_rl\nrendezvous:\n  master_addr: [oops\n")
    assert_usage_error(islab("--cluster", str(bad), "--dry-run"), "malformed YAML at line")
    bad.write_text("nnodes: 2\nrendezvous: {master_adr: 10.0.0.1}\n")
    assert_usage_error(islab("--cluster", str(bad), "--dry-run"), "did you mean 'master_addr'?")
    bad.write_text("[1, 2]\n")
    assert_usage_error(islab("--cluster", str(bad), "--dry-run"), "not a mapping")


def test_env_variable_errors_name_the_variable(islab, monkeypatch):
    monkeypatch.setenv("ISLAB_NUM_ENVS", "lots")
    assert_usage_error(islab("--dry-run"), "ISLAB_NUM_ENVS", "whole number")


# ----------------------------------------------------------------------------------------------
# Launch-time checks (no --dry-run): refused before anything starts
# ----------------------------------------------------------------------------------------------


def test_multinode_launch_without_node_rank_is_refused(islab, tmp_path):
    err = assert_usage_error(
        islab("--cluster", str(REPO / "configs/cluster/cpu.yaml"), "--nnodes", "2", "--master-addr", "10.0.0.1",
              "--log-dir", str(tmp_path / "L")),
        "node_rank", "--node-rank 0",
    )  # fmt: skip
    assert "--dry-run" in err
    assert not (tmp_path / "L").exists()


def test_gpus_above_visible_devices_is_refused(islab, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert_usage_error(islab("--gpus", "4", "--log-dir", str(tmp_path)), "--gpus 2", "--device cpu --nproc 4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert_usage_error(islab("--gpus", "1", "--log-dir", str(tmp_path)), "no CUDA device", "--device cpu --nproc 1")
    assert list(tmp_path.iterdir()) == []


def test_gpu_check_counts_the_spec_env_the_ranks_get(islab, monkeypatch, tmp_path):
    """Issue 14 item 3: CUDA_VISIBLE_DEVICES in the spec's env: is what the ranks see; two ranks
    on one visible GPU would share it, so the launch is refused naming the mismatch."""
    from islab.doctor import facts as doctor_facts

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cluster = tmp_path / "one-gpu.yaml"
    cluster.write_text(yaml.safe_dump({"device": "cuda", "nproc_per_node": 2, "env": {"CUDA_VISIBLE_DEVICES": "3"}}))
    logs = tmp_path / "logs"
    message = assert_usage_error(islab("--cluster", str(cluster), "--log-dir", str(logs)), "--gpus 1", "share a GPU")
    assert "2 GPU processes" in message and not logs.exists()
    from datetime import datetime

    from islab.plan.plan import build_plan
    from islab.resolve.resolve import resolve_spec

    spec = resolve_spec(cluster_file=cluster).spec
    facts = doctor_facts.gather_facts(spec, build_plan(spec, now=datetime(2026, 1, 1), free_port=29500), full=False)
    assert facts.visible_gpus == 1  # doctor counts the ranks' view too


def test_windows_is_refused_but_dry_run_works(islab, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "win32")
    assert_usage_error(islab("--device", "cpu", "--log-dir", str(tmp_path)), "platform", "WSL2")
    assert islab("--device", "cpu", "--dry-run")[0] == 0


def test_busy_master_port_is_refused(islab, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        err = assert_usage_error(islab("--device", "cpu", "--master-port", port, "--log-dir", str(tmp_path)), port)
        assert "already in use" in err
    assert list(tmp_path.iterdir()) == []


def test_real_launch_runs_the_plan_and_records_it(islab, tmp_path):
    """A stand-in interpreter records what it was asked to run and exits 3: islab-train must create
    the run dir, write launch.yaml, pass the argv and env, and exit with the launcher's status."""
    record = tmp_path / "record.txt"
    fake_python = tmp_path / "fake-python"
    script = f"""#!/bin/sh
printf "%s\\n" "$@" > {record}
echo "REFRESH=$GIT_PYTHON_REFRESH SECRET=$MY_TOKEN" >> {record}
exit 3
"""
    fake_python.write_text(script)
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IEXEC)
    cluster = tmp_path / "c.yaml"
    cluster.write_text("env: {MY_TOKEN: s3cr3t}\n")
    # --preflight off: the stand-in cannot run the probe (the pre-flight's own tests: test_preflight_launch.py)
    code, _, err = islab("--cluster", str(cluster), "--device", "cpu", "--nproc", "2", "--python", str(fake_python),
                           "--log-dir", str(tmp_path / "logs"), "--run-name", "t1", "--preflight", "off")  # fmt: skip
    assert code == 3
    assert "torchrun exit code 3" in err
    lines = record.read_text().splitlines()
    assert lines[:2] == ["-m", "torch.distributed.run"]
    assert "REFRESH=quiet SECRET=s3cr3t" in lines  # the real secret reaches the launcher
    (run_dir,) = (tmp_path / "logs" / "rsl_rl" / "Islab-Cartpole-v0").iterdir()
    assert run_dir.name.endswith("_t1")
    assert lines[lines.index("--run-dir") + 1] == str(run_dir)
    launch = yaml.safe_load((run_dir / "launch.yaml").read_text())
    assert launch["spec"]["nproc_per_node"] == 2 and launch["sources"]["nproc_per_node"] == "cli"
    assert launch["sources"]["env"] == "file" and launch["env"]["MY_TOKEN"] == "****"
    assert "s3cr3t" not in (run_dir / "launch.yaml").read_text()


# ----------------------------------------------------------------------------------------------
# Fresh interpreters: no torch on the fast paths, the console script, the real worker
# ----------------------------------------------------------------------------------------------

HEAVY = ("torch", "numpy", "gymnasium", "jax", "skrl", "rsl_rl", "rl_games")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--dry-run"], 0),
        (["--lib", "skrl", "--ml-framework", "jax", "--gpus", "2", "--dry-run", "--json"], 0),
        (["--lib", "rl_games", "--device", "cpu", "--nproc", "2", "--total-env-steps", "100000", "--dry-run"], 0),
        (["--help"], 0),
        (["--num-envs", "0", "--dry-run"], 2),
        (["sbatch", "--device", "cpu", "--nproc", "2", "--log-dir", "{tmp}/logs"], 0),
        (["doctor", "--help"], 0),
    ],
)
def test_fast_paths_import_no_torch(args, code, tmp_path):
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "islab.cli", *args],
        capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    top_level = {name.split(".")[0] for name in imported}
    assert top_level.isdisjoint(HEAVY), sorted(top_level & set(HEAVY))
    assert result.returncode == code, result.stderr[-2000:]


@pytest.mark.slow
def test_real_worker_crash_names_the_rank(tmp_path):
    if not WORKER_MAIN.exists():
        pytest.skip("src/islab/worker/__main__.py does not exist yet (the worker is written separately)")
    env = {**os.environ, "ISLAB_TEST_CRASH_RANK": "1", "CUDA_VISIBLE_DEVICES": ""}
    env = {k: v for k, v in env.items() if not k.startswith("ISLAB_") or k == "ISLAB_TEST_CRASH_RANK"}
    result = subprocess.run(
        [sys.executable, "-m", "islab.cli", "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "64",
         "--max-iterations", "2", "--log-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    message = [line for line in result.stderr.splitlines() if line.startswith("error: training failed")]
    assert message, result.stderr[-3000:]
    assert "rank 1 failed" in message[0] and "rank_1.log" in message[0]
    assert "rank_0.log" not in message[0]  # rank 0 was only stopped by torchrun


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fault", "cause"),
    [
        # a user's mistake that passes the pre-launch type check and fails in the library (rsl_rl's storage)
        (["algorithm.num_mini_batches=0"], {}, "ZeroDivisionError: integer division or modulo by zero"),
        # rank 0 raises after its first iteration: the progress shown before the failure stays
        (
            [],
            {"ISLAB_TEST_CRASH_RANK": "0", "ISLAB_TEST_CRASH_AT_ITERATION": "1"},
            "RuntimeError: test fault injection",
        ),
    ],
    ids=["bad-override", "raises-mid-training"],
)
def test_failing_rank_is_one_line_as_it_happens_then_its_whole_traceback_above_the_error(tmp_path, args, fault, cause):
    """Issue 23 item 13: rank 0's stderr reaches the console, but a traceback becomes one line as it
    happens (the exception and the log holding the rest), and the error line names node, rank,
    exception and log. Issue 30 item 4: above the error line, the failing rank's traceback once,
    whole (not a tail of its log), and the agent-config override it points at."""
    env = child_env() | fault | {"CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-m", "islab.cli", "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--num-envs", "16",
         "--max-iterations", "3", "--log-dir", str(tmp_path), *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    console = result.stdout + result.stderr
    for dump in ("last lines of", "last output of", "ChildFailedError", "closing signal"):
        assert dump not in console, console
    assert console.count("Traceback (most recent call last)") == 1, console
    shown = result.stderr[result.stderr.index("traceback (") :].splitlines()
    assert shown[1] == "    Traceback (most recent call last):", shown
    assert any(line.startswith(f"    {cause}") for line in shown), shown
    override = "  likely cause: the agent-config override algorithm.num_mini_batches=0 (num_mini_batches is in"
    assert (override in result.stderr) is bool(args), result.stderr
    log = next(tmp_path.glob("rsl_rl/*/*/logs/rank_0.log"))
    assert "Traceback (most recent call last)" in log.read_text() and cause in log.read_text()  # kept
    [note] = [line for line in result.stderr.splitlines() if line.startswith("[rank 0] ") and cause in line]
    assert note.startswith(f"[rank 0] {cause}") and note.endswith(f"(traceback in {log})"), note
    error = result.stderr.rstrip().splitlines()[-1]
    assert error.startswith("error: training failed on node 0"), error
    # "rank R failed with ...", or "ranks 0, 1 failed (rank R with ...)": with the bad override both
    # ranks raise it, and the earlier error file names the rank
    named = re.search(rf"rank (\d) (failed )?with {re.escape(cause)}", error)
    assert named, error
    assert str(log.with_name(f"rank_{named.group(1)}.log")) in error, error
    if fault:
        assert "islab-train: iteration 1/3" in result.stdout, result.stdout  # progress before the failure


def test_shell_completion_offers_the_choices():
    env = {
        **os.environ,
        "_ISLAB_TRAIN_COMPLETE": "complete_bash",
        "COMP_WORDS": "islab-train --lib ",
        "COMP_CWORD": "2",
    }
    result = subprocess.run([sys.executable, "-m", "islab.cli"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["rl_games", "rsl_rl", "skrl"]


# ----------------------------------------------------------------------------------------------
# Rendezvous timeout and elastic node counts
# ----------------------------------------------------------------------------------------------


def test_elastic_nnodes_and_rdzv_timeout_reach_torchrun(islab):
    plan = dry_json(
        islab, "--device", "cpu", "--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400",
        "--rdzv-timeout", "45", "--max-restarts", "2",
    )  # fmt: skip
    argv = plan["nodes"][0]["argv"]
    assert argv[argv.index("--nnodes") + 1] == "1:2"
    assert argv[argv.index("--rdzv_conf") + 1] == "join_timeout=45"
    assert argv[argv.index("--max_restarts") + 1] == "2"


def test_elastic_nnodes_and_rdzv_timeout_from_the_environment(islab, monkeypatch):
    monkeypatch.setenv("ISLAB_NNODES", "1:2")
    monkeypatch.setenv("ISLAB_RDZV_TIMEOUT", "7")
    argv = dry_json(islab, "--device", "cpu", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1")["nodes"][0]["argv"]
    assert argv[argv.index("--nnodes") + 1] == "1:2"
    assert argv[argv.index("--rdzv_conf") + 1] == "join_timeout=7"
    code, out, _ = islab("--device", "cpu", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--dry-run")
    assert code == 0 and "nnodes" in out and "1:2  (source: env, ISLAB_NNODES)" in out


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--nnodes", "1:2"], ["nnodes (--nnodes)", "needs torchrun's c10d rendezvous", "--rdzv-backend c10d"]),
        (["--nnodes", "3:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1"], ["MIN is larger than MAX"]),
        (["--nnodes", "two"], ["neither a whole number nor MIN:MAX"]),
        (["--rdzv-timeout", "0"], ["rendezvous.timeout_s (--rdzv-timeout)", "at least 1"]),
    ],
)
def test_bad_node_ranges_and_timeouts_are_usage_errors(islab, args, fragments):
    assert_usage_error(islab("--device", "cpu", *args, "--dry-run"), *fragments)


def test_help_shows_the_new_cluster_options(islab):
    code, out, _ = islab("--help")
    assert code == 0
    assert "--rdzv-timeout" in out and "MIN:MAX" in out


def test_the_option_table_is_the_one_declaration_of_every_option(islab):
    """Every spec field but ``env`` (cluster file only) has exactly one option row (the trailing
    KEY=VALUE items are ``overrides``); each row's ISLAB_* variable is read, and the help states
    the schema's defaults without a copy of them in the help strings."""
    from islab.cli.options import OPTIONS, spec_default
    from islab.spec.run_spec import FIELDS

    fields = [option.field for option in OPTIONS if option.field]
    # the three kinds of entry point set one field; its ``args`` are what follows ``--``
    assert [option.flag for option in OPTIONS if option.field == "entrypoint"] == ["--script", "--module", "--command"]
    fields = [field for field in fields if field != "entrypoint"] + ["entrypoint"]
    assert sorted(fields) == sorted(set(FIELDS) - {"env", "overrides", "args"})
    assert spec_default("max_iterations") == 150 and spec_default("rendezvous.timeout_s") is None
    code, out, _ = islab("--help")
    assert code == 0 and "Default: 150." in out and "--rdzv-timeout" in out
    from islab.cli.options import BY_NAME

    assert "torchrun static 900, c10d 600; skrl-JAX 300" in BY_NAME["rdzv_timeout"].help_text()


def test_per_node_options_must_agree_with_the_shared_cluster_file(islab, tmp_path):
    """Issue 14 item 5: options every node must agree on are refused when one node's command line
    changes the shared file; torchrun's --nproc-per-node may differ per node (its rendezvous sums
    the world size), skrl-JAX's may not (JAX_WORLD_SIZE = nnodes x nproc on every rank)."""
    shared = str(REPO / "configs" / "cluster" / "two-node-static.yaml")
    off = ("--preflight", "off")  # with the pre-flight on, the nodes compare these before training (below)
    code, out, err = islab("--cluster", shared, "--node-rank", "1", "--master-port", "29600", "--dry-run", *off)
    assert code == 2 and out == "" and err.startswith("error: rendezvous.master_port") and "two-node-static" in err
    code, _, err = islab("--cluster", shared, "--node-rank", "1", "--gpus", "4", "--dry-run")
    assert code == 0, err
    jax = tmp_path / "jax.yaml"
    jax.write_text(yaml.safe_dump({"lib": "skrl", "ml_framework": "jax", "device": "cpu", "nnodes": 2,
                                   "nproc_per_node": 2, "coordinator_address": "10.0.0.1:5000"}))  # fmt: skip
    code, out, err = islab("--cluster", str(jax), "--node-rank", "1", "--nproc", "4", "--dry-run", *off)
    assert code == 2 and err.startswith("error: nproc_per_node (--nproc)"), err
    assert islab("--cluster", str(jax), "--node-rank", "1", "--dry-run")[0] == 0


# --- issue 14 items 5 and 13: what every node must agree on, and one run directory --------------

# A two-node CPU job that sets none of the worker's fields (so an entry point may be given), and a
# per-node option giving each field every node must agree on another value than the file does
# (its own or the default). Extra keys of the file for that row, then the option.
_SHARED_NODE_FILE = {"nnodes": 2, "device": "cpu", "nproc_per_node": 2, "rendezvous": {"master_addr": "10.0.0.1"}}
_DISAGREEING = {
    "lib": ({}, ["--lib", "rl_games"]),
    "ml_framework": ({"lib": "skrl"}, ["--ml-framework", "jax"]),  # the schema refuses it first
    "task": ({}, ["--task", "Islab-Quadcopter-v0"]),
    "task_module": ({}, ["--task-module", "my_tasks"]),
    "num_envs": ({}, ["--num-envs", "64"]),
    "seed": ({"seed": 1}, ["--seed", "2"]),
    "max_iterations": ({}, ["--max-iterations", "3"]),
    "total_env_steps": ({}, ["--total-env-steps", "1000"]),
    "nnodes": ({}, ["--nnodes", "3"]),
    "device": ({}, ["--gpus", "2"]),
    "max_restarts": ({}, ["--max-restarts", "1"]),
    "coordinator_address": ({"lib": "skrl", "ml_framework": "jax", "rendezvous": {},
                             "coordinator_address": "10.0.0.1:5000"}, ["--coordinator-address", "10.0.0.1:5001"]),
    "run_name": ({"run_name": "a"}, ["--run-name", "b"]),
    "overrides": ({}, ["algorithm.clip_param=0.3"]),
    "resume": ({}, ["--resume", "RUN"]),
    "checkpoint_interval": ({}, ["--checkpoint-interval", "3"]),
    "logger": ({}, ["--logger", "wandb"]),
    "entrypoint": ({}, ["--script", "train.py"]),
    "args": ({"entrypoint": {"script": "train.py"}, "args": ["--a"]}, ["--", "--b"]),
    "isaaclab": ({"task": "Isaac-Cartpole-v0", "device": "cuda"}, ["--isaaclab", "ISAACLAB"]),  # CPU: one rank only
    "mjlab": ({"task": "Mjlab-Cartpole-Balance"}, ["--mjlab"]),  # the preset refuses several nodes itself
    "rendezvous.backend": ({"rendezvous": {"master_addr": "10.0.0.1", "master_port": 29500}},
                           ["--rdzv-backend", "c10d"]),  # the schema refuses static options under c10d
    "rendezvous.master_addr": ({}, ["--master-addr", "10.0.0.2"]),
    "rendezvous.master_port": ({}, ["--master-port", "29600"]),
    "rendezvous.endpoint": ({"rendezvous": {"backend": "c10d", "endpoint": "10.0.0.1:29400"}},
                            ["--rdzv-endpoint", "10.0.0.1:29401"]),
    "rendezvous.id": ({"rendezvous": {"backend": "c10d", "endpoint": "10.0.0.1:29400"}}, ["--rdzv-id", "other"]),
    "rendezvous.timeout_s": ({}, ["--rdzv-timeout", "60"]),
    "rendezvous.last_call_s": ({"rendezvous": {"backend": "c10d", "endpoint": "10.0.0.1:29400"}},
                               ["--rdzv-last-call", "5"]),
}  # fmt: skip
# Rows refused by an earlier rule that names another field (the combination is invalid anyway).
_REFUSED_BY = {
    "ml_framework": "rendezvous.master_addr",
    "mjlab": "--mjlab",
    "rendezvous.backend": "rendezvous.master_addr",
}


def test_every_field_is_either_shared_by_all_nodes_or_per_node():
    from islab.spec.launch_rules import PER_NODE_FIELDS, SHARED_FIELDS
    from islab.spec.run_spec import FIELDS

    assert not set(SHARED_FIELDS) & set(PER_NODE_FIELDS)
    assert sorted([*SHARED_FIELDS, *PER_NODE_FIELDS]) == sorted(FIELDS)
    assert set(_DISAGREEING) == set(SHARED_FIELDS)


@pytest.mark.parametrize("field", list(_DISAGREEING))
def test_a_node_may_not_disagree_on_a_shared_field(islab, clean_environment, tmp_path, monkeypatch, field):
    """Issue 14 item 5: every field of SHARED_FIELDS given on one node's command line with another
    value than the shared cluster file's (or its default) is refused, naming the field and file."""
    (tmp_path / "my_tasks.py").write_text(
        'import gymnasium as gym\ngym.register(id="My-v0", '
        'entry_point="islab.tasks.cartpole.cartpole_env:CartpoleEnv", kwargs={'
        '"env_cfg_entry_point": "islab.tasks.cartpole.cartpole_env:CartpoleEnvCfg", '
        '"rsl_rl_cfg_entry_point": "islab.tasks.cartpole.agents:rsl_rl_ppo_cfg.yaml"})\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    from islab.tasks import TASKS

    monkeypatch.setattr(TASKS, "_entries", dict(TASKS.entries))
    monkeypatch.setattr(TASKS, "_modules", list(TASKS._modules))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    extra, argv = _DISAGREEING[field]
    data = {**_SHARED_NODE_FILE, **extra}
    data["rendezvous"] = extra.get("rendezvous", _SHARED_NODE_FILE["rendezvous"])
    shared = tmp_path / "shared.yaml"
    shared.write_text(yaml.safe_dump(data))
    tree = str(REPO / "tests" / "fixtures" / "isaaclab_tree")
    argv = [{"RUN": str(run), "ISAACLAB": tree}.get(arg, arg) for arg in argv]
    before = [arg for arg in argv if arg != "--" and "--" in argv and argv.index(arg) < argv.index("--")]
    options, after = (before, argv[argv.index("--") :]) if "--" in argv else (argv, [])
    code, out, err = islab("--cluster", str(shared), "--node-rank", "1", "--dry-run", "--preflight", "off", *options,
                           *after)  # fmt: skip
    named = _REFUSED_BY.get(field, field)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith((f"error: {named}", f"error: shared.yaml: {named}")), err
    if field not in _REFUSED_BY:
        assert "shared.yaml" in err and "every node" in err, err
    if "task" not in extra:  # (a preset's task id needs the preset) the file alone is a valid job
        assert islab("--cluster", str(shared), "--node-rank", "1", "--dry-run")[0] == 0


def test_with_the_preflight_on_a_node_may_give_shared_fields_on_its_command_line(islab, clean_environment, monkeypatch):
    """Issue 22: the pre-flight compares the shared fields across nodes (naming a mismatch field by
    field before training), so one command line per node -- GR00T's torchrun style -- is accepted."""
    monkeypatch.delenv("ISLAB_PREFLIGHT")  # the default: on
    shared = str(REPO / "configs" / "cluster" / "two-node-static.yaml")
    for argv in (["--seed", "1"], ["--master-port", "29600"], ["--num-envs", "64", "algorithm.clip_param=0.3"]):
        code, _, err = islab("--cluster", shared, "--node-rank", "1", "--dry-run", *argv)
        assert code == 0, (argv, err)
        code, _, err = islab("--cluster", shared, "--node-rank", "1", "--dry-run", "--preflight", "off", *argv)
        assert code == 2 and "every node" in err, (argv, err)


def _run_dir(islab, *argv: str) -> str:
    code, out, err = islab(*argv, "--dry-run")
    assert code == 0, err
    return next(line for line in out.splitlines() if line.startswith("# run dir: ")).removeprefix("# run dir: ")


def test_every_node_names_the_same_run_directory(islab, clean_environment, tmp_path):
    """Issue 14 item 13: the run directory's name comes from what all nodes share, so what may
    differ per node (torchrun's process count, the interpreter, the node rank) does not split it."""
    shared = str(REPO / "configs" / "cluster" / "two-node-static.yaml")
    node0 = _run_dir(islab, "--cluster", shared, "--node-rank", "0")
    assert node0.startswith("logs/rsl_rl/Islab-Cartpole-v0/spec-") and node0.endswith("_two_node")
    assert _run_dir(islab, "--cluster", shared, "--node-rank", "1") == node0
    assert _run_dir(islab, "--cluster", shared, "--node-rank", "1", "--gpus", "4") == node0
    assert _run_dir(islab, "--cluster", shared, "--node-rank", "1", "--python", "/opt/py/bin/python3") == node0
    assert _run_dir(islab, "--cluster", shared) == node0  # the dry run of every node
    # ... and a job that trains something else gets a directory of its own.
    other = tmp_path / "two-node-static.yaml"
    other.write_text(Path(shared).read_text().replace("seed: 42", "seed: 7"))
    assert _run_dir(islab, "--cluster", str(other), "--node-rank", "1") != node0


def test_a_run_directory_holding_another_run_is_not_trained_into_again(islab, tmp_path):
    """Issue 23 item 7: an identical multi-node rerun names the same spec-<digest> directory; it is
    refused (exit 2, nothing started) instead of overwriting the first run's checkpoints -- unless it
    resumes that run, is the same SLURM job (a requeue), or joins that job while it runs."""
    import time
    from datetime import datetime

    from islab.cli.launch_checks import run_dir_taken
    from islab.plan.plan import build_plan
    from islab.resolve.resolve import Provided, resolve_spec
    from islab.rundir import latest_checkpoint, write_heartbeat, write_summary

    two_node = ("--device", "cpu", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                "--rdzv-timeout", "5", "--log-dir", str(tmp_path / "logs"))  # fmt: skip
    code, out, err = islab(*two_node, "--dry-run")
    assert code == 0, err
    run_dir = next(line for line in out.splitlines() if line.startswith("# run dir: ")).removeprefix("# run dir: ")
    latest_checkpoint(run_dir).parent.mkdir(parents=True)
    latest_checkpoint(run_dir).write_bytes(b"the first run's checkpoint")
    code, out, err = islab(*two_node)
    assert code == 2 and out == "", err
    assert err.startswith("error: run directory:") and "--run-name" in err and f"--resume {run_dir}" in err, err
    assert latest_checkpoint(run_dir).read_bytes() == b"the first run's checkpoint"

    def taken(slurm_job_id=None, **values):
        layer = {"device": "cpu", "log_dir": str(tmp_path / "logs"), **values}
        spec = resolve_spec({name: Provided(value, f"--{name}") for name, value in layer.items()}).spec
        plan = build_plan(spec, now=datetime.now(), free_port=29999, slurm_job_id=slurm_job_id)
        return plan, run_dir_taken(spec, plan, slurm_job_id, now=time.time())

    node1 = {"nnodes": 2, "node_rank": 1, "rendezvous.master_addr": "127.0.0.1", "rendezvous.timeout_s": 5}
    plan, issue = taken(**node1)
    assert plan.run_dir == run_dir and issue is not None  # node 1 of the rerun too
    assert taken(resume=run_dir)[1] is None  # continuing it
    plan, issue = taken(slurm_job_id=77)  # a requeued SLURM job finds its own directory
    latest_checkpoint(plan.run_dir).parent.mkdir(parents=True)
    latest_checkpoint(plan.run_dir).write_bytes(b"")
    assert taken(slurm_job_id=77)[1] is None
    write_heartbeat(run_dir, 0, iteration=3, done=3)  # that job still runs: a node joins it
    assert taken(**node1)[1] is None
    time.sleep(0.05)
    write_summary(run_dir, {"iterations": 3})  # ... until it ended
    assert taken(**node1)[1] is not None
    assert taken(**node1, run_name="again")[1] is None


def _file_digests(root: Path) -> dict[str, str]:
    import hashlib

    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}  # fmt: skip


@pytest.mark.slow  # the session's one 1-rank rsl_rl run (trained here when no other test did)
def test_resume_of_a_run_at_its_target_starts_nothing_and_leaves_the_run_as_it_was(islab, tmp_path, one_rank_run):
    """Issue 30 item 2: ``--resume RUN`` alone, of a run that trained to its target, used to start
    the ranks, train nothing and overwrite summary.json with 0 iterations. It says so, names the
    command that trains further, exits 0, and no file of the run changes."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(one_rank_run("rsl_rl"), run_dir)  # copy2: the files' times too
    before = _file_digests(run_dir)
    code, out, err = islab("--resume", str(run_dir))
    assert code == 0 and out == "", err
    assert f"{run_dir} already reached its target (iteration 2 of 2); nothing was started" in err, err
    assert f"islab-train --resume {run_dir} --max-iterations M (M more iterations)" in err
    assert _file_digests(run_dir) == before


def test_a_new_run_of_one_node_claims_its_directory_and_the_nodes_of_a_job_share_theirs(tmp_path):
    """Issue 30 item 1: a new one-node run creates its directory itself, and a second launch that
    planned the same name (the same second) gets ``<name>-2``; the nodes of a multi-node job, a
    scheduler's job and ``--resume`` join the directory they agree on by name, already there or not
    (on a shared file system another node may have made it first)."""
    from datetime import datetime

    from islab.cli.launch_checks import claim_run_dir
    from islab.plan.plan import build_plan
    from islab.resolve.resolve import Provided, resolve_spec
    from islab.rundir import latest_checkpoint

    def planned(**values):
        layer = {"device": "cpu", "log_dir": str(tmp_path / "logs"), **values}
        spec = resolve_spec({name: Provided(value, f"--{name}") for name, value in layer.items()}).spec
        return spec, build_plan(spec, now=datetime(2026, 1, 1, 12), free_port=29999)

    spec, plan = planned()
    assert claim_run_dir(spec, plan, None) == plan.run_dir and Path(plan.run_dir).is_dir()
    assert claim_run_dir(spec, plan, None) == f"{plan.run_dir}-2"  # the second launch of that second
    latest_checkpoint(plan.run_dir).parent.mkdir()
    latest_checkpoint(plan.run_dir).write_bytes(b"")
    assert claim_run_dir(*planned(resume=plan.run_dir), None) is None  # continuing it
    assert claim_run_dir(spec, plan, "slurm-77") is None  # a requeue finds its job's directory
    shared = []
    for node_rank in (1, 0):  # node 1 first: it made the directory on the shared file system
        spec, plan = planned(nnodes=2, node_rank=node_rank, **{"rendezvous.master_addr": "127.0.0.1"})
        Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
        assert claim_run_dir(spec, plan, None) is None, node_rank
        shared.append(plan.run_dir)
    assert shared[0] == shared[1] and not Path(f"{shared[0]}-2").exists()
