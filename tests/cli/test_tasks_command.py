"""`islab-train tasks`: the registry as a table or JSON, without torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("columns", [None, "200", "120", "80", "40"])
def test_the_tasks_listing_never_breaks_an_id_a_package_or_a_path(islab, monkeypatch, columns):
    """Issue 30 item 9: the table broke task ids mid-word even at COLUMNS=200 (it was 120 wide
    whatever the width) and the install line split its command. Each id and package stays whole on
    its line: a table where it fits, one task per line where it cannot; the notes are not wrapped
    (without COLUMNS and a terminal nothing is). The install line is README's, from the checkout."""
    monkeypatch.setitem(sys.modules, "mjlab", None)  # its tasks listed as needing the extra
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = islab("tasks")
    assert code == 0
    lines = out.splitlines()
    for task_id in TASKS:
        (line,) = [line for line in lines if re.search(rf"(^|[\s│]){re.escape(task_id)}([\s│:]|$)", line)]
        assert TASKS.entry(task_id).package in line, (task_id, line)
    table = any(line.startswith("┃ task ") for line in lines)
    assert table is (columns in (None, "200")), out  # 80 and 40 cannot hold the longest id and package
    if not table:
        assert all(any(line.startswith(f"{task_id}: ") for line in lines) for task_id in TASKS)
    install = 'python -m pip install -c torch-pin.txt -e ".[mjlab]".'
    assert any(line.startswith("[mjlab] is not installed") and line.endswith(install) for line in lines), out
    assert any(line.endswith("cartpole/agents/rsl_rl_ppo_cfg.yaml") for line in lines), out
