"""The bring-your-own fixtures run for real under torchrun (2 CPU ranks over gloo).

tests/fixtures/isaaclab_tree mirrors Isaac Lab's train.py scripts; tests/fixtures/ddp_finetune.py
is a plain DDP fine-tuning script. These tests prove the fixtures themselves do what the launcher
tests rely on: ranks end identical (real gradient all-reduce), rank 0 writes events where Isaac
Lab's script would and with the library's tags, a chosen rank fails with a traceback in torchrun's
error file, and the fine-tuning script saves its checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import FIXTURES
from ports import port_for_a_child

from islab.resolve.isaaclab import isaaclab_entry, tensorboard_root
from islab.run.tensorboard_progress import TensorBoardProgress

TREE = FIXTURES / "isaaclab_tree"


def _torchrun(cwd: Path, argv: list[str], extra_env: dict[str, str] | None = None, *torchrun_args: str):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(port_for_a_child()),
        *torchrun_args,
        *argv,
    ]
    env = {**os.environ, **(extra_env or {})}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=240)


def _digests(output: str) -> set[str]:
    return set(re.findall(r"digest ([0-9a-f]{16})", output))


@pytest.mark.slow
def test_isaaclab_rsl_rl_fixture_trains_on_two_ranks_and_writes_rsl_rl_events(tmp_path):
    entry = isaaclab_entry(TREE, "rsl_rl", task="Isaac-Cartpole-Direct-v0", num_envs=16, max_iterations=3)
    done = _torchrun(tmp_path, entry.argv())
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(re.findall(r"done: world 2", done.stdout)) == 2 and len(_digests(done.stdout)) == 1
    root = tensorboard_root("rsl_rl", tmp_path)
    (events,) = list(root.rglob("*tfevents*"))  # rank 0 only, in logs/rsl_rl/cartpole_direct/<time>/
    assert events.parent.parent.name == "cartpole_direct"
    printed = [float(v) for v in re.findall(r"rank 0 iteration \d/3 mean reward (-?[\d.]+)", done.stdout)]
    records = TensorBoardProgress(root, "rsl_rl").records()
    assert [r["iteration"] for r in records] == [1, 2, 3]
    assert [r["mean_return"] for r in records] == pytest.approx(printed, abs=1e-4)


@pytest.mark.slow
def test_isaaclab_fixture_failing_rank_is_in_torchruns_error_file(tmp_path):
    entry = isaaclab_entry(TREE, "rl_games", task="Isaac-Cartpole-Direct-v0", num_envs=16, max_iterations=3)
    done = _torchrun(tmp_path, entry.argv(), {"FIXTURE_FAIL_RANK": "1"}, "--log-dir", str(tmp_path / "torchrun"))
    assert done.returncode != 0
    errors = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "torchrun").rglob("error.json")}
    assert "fixture failure injected on rank 1" in errors["1"]["message"]["message"]
    assert "fixture_common.py" in errors["1"]["message"]["extraInfo"]["py_callstack"]


@pytest.mark.slow
def test_ddp_finetune_fixture_saves_its_checkpoint(tmp_path):
    import torch

    done = _torchrun(tmp_path, [str(FIXTURES / "ddp_finetune.py"), "--steps", "3"], {"ISLAB_RUN_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.findall(r"step \d/3 loss [\d.]+", done.stdout) and len(_digests(done.stdout)) == 1
    checkpoint = torch.load(tmp_path / "finetune.pt", weights_only=True)
    assert (checkpoint["steps"], checkpoint["world_size"]) == (3, 2)
    assert not list(tmp_path.glob("*.tmp"))
