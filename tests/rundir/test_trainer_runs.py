"""islab.rundir.trainer_runs: which of Isaac Lab's run folders a launch wrote, from what its rank 0
printed -- the lines Isaac Lab's train scripts print for its Ray tuner, as Isaac Lab 3.0.0's
backends write them (isaaclab_rl/entrypoints/backends/train_<lib>.py) -- and the record of them."""

from __future__ import annotations

from islab.rundir.trainer_runs import announced_folder, record_trainer_run, run_folder_of_events, trainer_runs


def test_the_announced_folder_is_the_log_root_and_run_name_isaac_lab_printed(tmp_path):
    root = tmp_path / "logs" / "rsl_rl" / "cartpole"
    (root / "2026-01-01_00-00-00").mkdir(parents=True)
    rsl_rl = [
        f"[INFO] Logging experiment in directory: {root}",
        "Exact experiment name requested from command line: 2026-01-01_00-00-00",
    ]
    assert announced_folder(["[rank 0 noise]", *rsl_rl]) == root / "2026-01-01_00-00-00"
    # rl_games prints the whole folder as the name; skrl adds its experiment name after printing
    games = tmp_path / "logs" / "rl_games" / "cartpole" / "2026-01-01_00-00-00"
    games.mkdir(parents=True)
    assert announced_folder([f"[INFO] Logging experiment in directory: {games.parent}",
                             f"Exact experiment name requested from command line: {games}"]) == games  # fmt: skip
    skrl = tmp_path / "logs" / "skrl" / "cartpole"
    (skrl / "2026-01-01_00-00-00_ppo_torch_mine").mkdir(parents=True)
    lines = [
        f"[INFO] Logging experiment in directory: {skrl}",
        "Exact experiment name requested from command line: 2026-01-01_00-00-00_ppo_torch",
    ]
    assert announced_folder(lines) == skrl / "2026-01-01_00-00-00_ppo_torch_mine"
    assert announced_folder(rsl_rl[:1]) is None  # a root alone (2.x rl_games) names no run


def test_each_launch_s_folder_is_recorded_once_in_order(tmp_path):
    first = run_folder_of_events(tmp_path / "logs" / "rl_games" / "c" / "a" / "summaries" / "events.out.tfevents.1.h")
    assert first == tmp_path / "logs" / "rl_games" / "c" / "a"
    record_trainer_run(tmp_path, first, "rl_games")
    record_trainer_run(tmp_path, first, "rl_games")  # the same launch again (a node's second look)
    record_trainer_run(tmp_path, tmp_path / "b", "rl_games")
    assert [record["folder"] for record in trainer_runs(tmp_path)] == [str(first), str(tmp_path / "b")]
