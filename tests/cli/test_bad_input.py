"""Every kind of bad input, in one table: YAML files, command-line options, ISLAB_* environment and
agent-config overrides. Each must give exit code 2, one `error: <field>: ...` message naming the
field, no traceback, no process started and no run directory created. These are real launches
(no --dry-run): if validation let one through, the launcher would try to start a process."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from islab import cli
from islab.spec.fields import DEFAULT_TASK
from islab.tasks import TASKS

# --logger wandb on a machine without a login (no key, no ~/.netrc entry, not offline)
NO_WANDB_LOGIN = {"HOME": "/nonexistent-home", "WANDB_API_KEY": "", "WANDB_MODE": "", "NETRC": ""}
CASES: list[tuple[str, list[str], dict[str, str], str | None, str]] = [
    # (id, command-line args, ISLAB_* environment, cluster YAML text or None, field the message names)
    ("yaml-malformed", [], {}, "lib: rsl_rl\nnum_envs: [1, 2\n", "line"),
    ("yaml-not-a-mapping", [], {}, "- lib\n- rsl_rl\n", "mapping"),
    ("yaml-unknown-key", [], {}, "lib: rsl_rl\nnum_env: 64\n", "num_env"),
    ("yaml-unknown-nested-key", [], {}, "rendezvous:\n  mastr_addr: 10.0.0.1\n", "mastr_addr"),
    ("yaml-wrong-type", [], {}, "seed: lots\n", "seed"),
    ("yaml-string-number", [], {}, "max_iterations: '5'\n", "max_iterations"),
    (
        "yaml-port-range",
        [],
        {},
        "nnodes: 2\nnode_rank: 0\nrendezvous:\n  master_addr: 10.0.0.1\n  master_port: 70000\n",
        "master_port",
    ),
    ("yaml-env-not-mapping", [], {}, "env: [A, B]\n", "env"),
    ("yaml-budget-and-iterations", [], {}, "total_env_steps: 100000\nmax_iterations: 150\n", "total_env_steps"),
    (
        "yaml-hostile-host",
        [],
        {},
        "nnodes: 2\nnode_rank: 0\nrendezvous:\n  master_addr: 'h; rm -rf /'\n",
        "master_addr",
    ),
    ("cli-unknown-lib", ["--lib", "rllib"], {}, None, "lib"),
    ("cli-unknown-task", ["--task", "Islab-Cartpol-v0"], {}, None, "task"),
    ("cli-zero-envs", ["--num-envs", "0"], {}, None, "num_envs"),
    ("cli-zero-nproc", ["--nproc", "0"], {}, None, "nproc"),
    ("cli-negative-iterations", ["--max-iterations", "-5"], {}, None, "max_iterations"),
    (
        "cli-budget-and-iterations",
        ["--total-env-steps", "100000", "--max-iterations", "5"],
        {},
        None,
        "total_env_steps (--total-env-steps)",
    ),
    ("cli-zero-budget", ["--total-env-steps", "0"], {}, None, "total_env_steps"),
    ("cli-float-budget", ["--total-env-steps", "1e6"], {}, None, "--total-env-steps"),
    ("cli-port-zero", ["--master-port", "0"], {}, None, "master_port"),
    (
        "cli-node-rank-out-of-range",
        ["--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1"],
        {},
        None,
        "node_rank",
    ),
    ("cli-multinode-without-master", ["--nnodes", "2", "--node-rank", "1"], {}, None, "master_addr"),
    ("cli-jax-with-rsl_rl", ["--lib", "rsl_rl", "--ml-framework", "jax"], {}, None, "ml_framework"),
    (
        "cli-jax-with-torchrun-option",
        ["--lib", "skrl", "--ml-framework", "jax", "--rdzv-backend", "c10d"],
        {},
        None,
        "rendezvous",
    ),
    ("cli-coordinator-on-torchrun", ["--coordinator-address", "127.0.0.1:5000"], {}, None, "coordinator_address"),
    ("cli-hostile-run-name", ["--run-name", "x; touch /tmp/pwned"], {}, None, "run_name"),
    ("cli-newline-run-name", ["--run-name", "a\nb"], {}, None, "run_name"),
    ("cli-en-dash", ["–distributed"], {}, None, "--distributed"),
    ("cli-em-dash", ["—num-envs", "64"], {}, None, "--num-envs"),
    ("cli-gpus-on-machine-without", ["--gpus", "2", "--device", "cuda"], {}, None, "gpus"),
    ("cli-missing-cluster-file", ["--cluster", "/nonexistent/cluster.yaml"], {}, None, "cluster"),
    ("env-wrong-type", [], {"ISLAB_SEED": "many"}, None, "ISLAB_SEED"),
    ("env-unknown-lib", [], {"ISLAB_LIB": "sb3"}, None, "ISLAB_LIB"),
    ("override-malformed", ["algorithm"], {}, None, "override"),
    ("override-unknown-key", ["algorithm.learnig_rate=1e-4"], {}, None, "algorithm.learning_rate"),
    ("override-into-a-value", ["algorithm.gamma.x=1"], {}, None, "algorithm.gamma"),
    ("override-hostile", ["algorithm.x=$(reboot)"], {}, None, "override"),
    ("override-wrong-type", ["algorithm.learning_rate=abc"], {}, None, "algorithm.learning_rate expects a number"),
    ("override-wrong-type-list", ["actor.hidden_dims=64"], {}, None, "actor.hidden_dims expects a list"),
    ("cli-wandb-without-login", ["--logger", "wandb"], NO_WANDB_LOGIN, None, "wandb login"),
    ("override-zero-rollout", ["--total-env-steps", "100000", "num_steps_per_env=0"], {}, None, "num_steps_per_env"),
]


@pytest.fixture
def no_launch(monkeypatch, clean_environment):
    """Any attempt to start a process fails the test.

    The default task's registration is read first: on a machine whose task cache is cold (a fresh
    CI clone) that read is a child process (islab.tasks.metadata), which reads the installed
    package once per version and launches nothing."""
    TASKS.describe([DEFAULT_TASK])

    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started for bad input: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.mark.parametrize(("args", "environ", "yaml_text", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_exit_2_with_one_clear_message_and_nothing_launched(
    tmp_path: Path, monkeypatch, capsys, no_launch, args, environ, yaml_text, field
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    log_dir = tmp_path / "logs"
    command = ["--device", "cpu", "--nproc", "2", "--num-envs", "64", "--log-dir", str(log_dir)]
    if yaml_text is not None:
        cluster = tmp_path / "cluster.yaml"
        cluster.write_text(textwrap.dedent(yaml_text))
        command += ["--cluster", str(cluster)]
    code = cli.run([*command, *args])
    captured = capsys.readouterr()
    assert code == 2, (captured.out, captured.err)
    assert captured.err.startswith("error: "), captured.err
    assert field in captured.err, captured.err
    assert "Traceback" not in captured.err and "validation error" not in captured.err.lower()
    assert not log_dir.exists(), "a run directory was created for bad input"


def test_the_table_covers_every_source_of_input() -> None:
    assert len(CASES) >= 25
    ids = [case[0] for case in CASES]
    for source in ("yaml-", "cli-", "env-", "override-"):
        assert any(i.startswith(source) for i in ids), source
