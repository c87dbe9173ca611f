"""islab.resolve.isaaclab_resume: the stored command of an Isaac Lab run, continued from a checkpoint
through Isaac Lab's own options -- the arguments checked with the parsers of the Isaac Lab fixture
(Isaac Lab 2.x's argument surface) and, for 2.x rsl_rl, with its get_checkpoint_path picking exactly
the checkpoint meant, among look-alike folders and files."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
from paths import FIXTURES

from islab.resolve.isaaclab_resume import ResumeProblem, resumed_args, target_of
from islab.rundir.trainer_runs import TrainerCheckpoint, checkpoints

SCRIPTS = FIXTURES / "isaaclab_tree" / "scripts" / "reinforcement_learning"


def _fixture(name: str, path: Path):
    sys.path.insert(0, str(path.parent))
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        sys.path.remove(str(SCRIPTS))
    return module


def _checkpoint(path: Path, number: int) -> TrainerCheckpoint:
    path.parent.mkdir(parents=True, exist_ok=True)

    with zipfile.ZipFile(path, "w") as archive:  # what torch.save writes: a zip archive with its pickle
        archive.writestr(f"{path.stem}/data.pkl", b"x")
    return TrainerCheckpoint(
        path, path.parent if path.parent.name not in ("nn", "checkpoints") else path.parent.parent, number
    )


STORED = ("--task", "Isaac-Cartpole-v0", "--num_envs", "8", "--seed", "1", "--max_iterations", "40", "--headless")


def test_rsl_rl_2x_resumes_with_resume_load_run_checkpoint_and_trains_what_is_left(tmp_path):
    root = tmp_path / "logs" / "rsl_rl" / "cartpole_direct"
    wanted = _checkpoint(root / "2026-01-01_00-00-00" / "model_10.pt", 10)
    _checkpoint(root / "2026-01-01_00-00-00_later" / "model_10.pt", 10)  # a later run whose name extends it
    _checkpoint(root / "2026-01-01_00-00-00" / "model_100.pt", 100)  # a file whose name extends the one meant
    args = resumed_args(STORED, "rsl_rl", wanted, more_iterations=None, cwd=tmp_path)
    train = _fixture("fixture_rsl_rl_train", SCRIPTS / "rsl_rl" / "train.py")
    parsed, hydra = train.parser.parse_known_args(args)
    assert (parsed.resume, parsed.max_iterations, hydra) == (True, 30, [])  # 40 - 10 left
    checkpoints_module = _fixture("fixture_checkpoints", SCRIPTS / "fixture_checkpoints.py")
    assert Path(checkpoints_module.get_checkpoint_path(str(root), parsed.load_run, parsed.checkpoint)) == wanted.path
    # a resume of that resume knows the target from its arguments (model_10 + 30 more)
    assert target_of(args, "rsl_rl") == 40
    again = resumed_args(
        args, "rsl_rl", _checkpoint(root / "b" / "model_25.pt", 25), more_iterations=None, cwd=tmp_path
    )
    assert train.parser.parse_known_args(again)[0].max_iterations == 15 and again.count("--resume") == 1
    assert resumed_args(STORED, "rsl_rl", wanted, more_iterations=5, cwd=tmp_path)[-7:-5] == ("--max_iterations", "5")


def test_rsl_rl_2x_refuses_another_working_directory_and_a_run_at_its_target(tmp_path):
    checkpoint = _checkpoint(tmp_path / "logs" / "rsl_rl" / "exp" / "run" / "model_40.pt", 40)
    with pytest.raises(ResumeProblem, match=f"Run islab-train --resume from {tmp_path}, where the run started"):
        resumed_args(STORED, "rsl_rl", checkpoint, more_iterations=1, cwd=tmp_path / "elsewhere")
    with pytest.raises(ResumeProblem, match="has reached its 40 iterations"):
        resumed_args(STORED, "rsl_rl", checkpoint, more_iterations=None, cwd=tmp_path)


@pytest.mark.parametrize("library", ["rl_games", "skrl"])
def test_rl_games_and_skrl_2x_resume_with_checkpoint_path(tmp_path, library):
    path = tmp_path / "run" / ("nn/last_c_ep_12_rew_1.0.pth" if library == "rl_games" else "checkpoints/agent_384.pt")
    checkpoint = _checkpoint(path, 12 if library == "rl_games" else 384)
    args = resumed_args(STORED, library, checkpoint, more_iterations=None, cwd=tmp_path / "anywhere")
    parsed, hydra = _fixture(f"fixture_{library}_train", SCRIPTS / library / "train.py").parser.parse_known_args(args)
    assert (parsed.checkpoint, parsed.max_iterations, hydra) == (str(path), 40, [])  # rl_games: epochs in all
    more = resumed_args(STORED, library, checkpoint, more_iterations=5, cwd=tmp_path)
    assert more[more.index("--max_iterations") + 1] == ("17" if library == "rl_games" else "5")


def test_isaaclab3_resumes_every_library_with_checkpoint_path_and_no_run_timestamp(tmp_path):
    stored = ("--rl_library", "rsl_rl", "--task", "Isaac-Cartpole", "--max_iterations", "40", "--device", "cpu",
              "agent.device=cpu", "--run_timestamp=2026-01-01_00-00-00")  # fmt: skip
    checkpoint = _checkpoint(tmp_path / "logs" / "rsl_rl" / "e" / "r" / "model_10.pt", 10)
    args = resumed_args(stored, "rsl_rl", checkpoint, more_iterations=None, cwd=tmp_path / "anywhere")
    assert args == (*stored[:4], "--device", "cpu", "agent.device=cpu", "--max_iterations", "30",
                    "--checkpoint", str(checkpoint.path))  # fmt: skip


def test_the_newest_complete_checkpoint_is_the_highest_number_and_a_truncated_one_is_skipped(tmp_path):
    folder = tmp_path / "run"
    for number in (5, 10):
        _checkpoint(folder / f"model_{number}.pt", number)
    (folder / "model_15.pt").write_bytes(b"PK\x03\x04 cut short")  # killed while torch.save wrote it
    with zipfile.ZipFile(folder / "model_20.pt", "w") as archive:  # what a SIGINT during torch.save left
        for name in ("version", "byteorder", ".data/serialization_id"):  # (Isaac Lab 3's rsl_rl, for real)
            archive.writestr(f"model_20/{name}", b"3")
    assert [item.number for item in checkpoints(folder, "rsl_rl")] == [5, 10]
    nn = tmp_path / "rl" / "nn"
    _checkpoint(nn / "last_c_ep_20_rew_1.0.pth", 20)
    _checkpoint(nn / "c.pth", None)  # the best so far: no number
    assert [item.path.name for item in checkpoints(tmp_path / "rl", "rl_games")] == [
        "c.pth",
        "last_c_ep_20_rew_1.0.pth",
    ]
