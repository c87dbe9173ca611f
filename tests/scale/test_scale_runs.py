"""``islab-train scale`` for real on 2 CPU ranks: the job at 1 then 2 ranks through the real launch path
(torchrun, the worker, rsl_rl), the real pre-flight's all-reduce, then the table, the limit line,
the prediction, ``scale.png`` and ``--json``. Small: 32 envs x 4 steps, 2 iterations a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_scale_on_two_cpu_ranks_prints_the_table_the_plot_and_the_json(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "islab.cli", "scale", "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2",
            "--num-envs", "32", "--iterations", "2", "--warmup", "1", "--preflight", "on",
            "--log-dir", str(tmp_path / "logs"), "--json", "num_steps_per_env=4"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    rows = document["rows"]
    assert [row["ranks"] for row in rows] == [1, 2]
    assert rows[0]["efficiency"] == 1.0 and 0 < rows[1]["efficiency"] < 2
    assert all(row["env_steps_per_s"] > 0 for row in rows)
    assert rows[0]["sync_share"] == 0.0 and 0 < rows[1]["sync_share"] <= 1  # the pre-flight measured gloo
    assert document["all_reduce"]["measured_at_ranks"] == 2 and document["all_reduce"]["alpha_us"] > 0
    assert [p["ranks"] for p in document["prediction"]] == [8, 16, 64]
    assert document["limit"] in ("none", "too few envs per rank", "sync", "stragglers")
    # the table, the limit line and the plot's path on stderr with --json; the files under --log-dir
    assert "ranks  env steps/s" in done.stderr and f"limit: {document['limit_line']}" in done.stderr
    folder = Path(document["plot"]).parent
    assert folder.parent == tmp_path / "logs" / "rsl_rl" / "Islab-Cartpole-v0"
    assert Path(document["plot"]).read_bytes().startswith(PNG_MAGIC)
    assert json.loads((folder / "scale.json").read_text())["rows"] == rows
    assert "limit: " in (folder / "scale.md").read_text()
    for ranks in (1, 2):  # each rank count is an ordinary run directory of the launch path
        assert (folder / f"ranks_{ranks}" / "progress.jsonl").is_file()
        assert (folder / f"ranks_{ranks}" / "logs" / f"rank_{ranks - 1}.log").is_file()
