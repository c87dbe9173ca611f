"""`islab-train tasks`: the registry as a table or JSON, without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from islab import cli
from islab.tasks import TASKS


def test_tasks_json_lists_every_task_with_sizes_and_configs(capsys):
    assert cli.run(["tasks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["task"] for row in rows] == list(TASKS)
    cartpole = rows[0]
    assert (cartpole["observation_size"], cartpole["action_size"], cartpole["default_num_envs"]) == (4, 1, 4096)
    assert cartpole["agent_configs"] == ["rl_games", "rsl_rl", "skrl"]


def test_tasks_table_and_no_torch():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "islab.cli", "tasks"],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip
    assert result.returncode == 0
    assert "Islab-Cartpole-v0" in result.stdout and "rl_games, rsl_rl, skrl" in result.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert imported.isdisjoint({"torch", "numpy", "gymnasium"})


def test_subcommand_help_has_examples(capsys):
    for name in ("doctor", "sbatch"):
        assert cli.run([name, "--help"]) == 0
        out = capsys.readouterr().out
        assert "Examples" in out and "--num-envs" in out, name
    assert cli.run(["--help"]) == 0
    out = capsys.readouterr().out
    for text in ("islab-train doctor", "islab-train sbatch", "islab-train tasks", "--all-ranks", "--slurm"):
        assert text in out, text
