"""Isaac Lab's habits typed to islab-train get islab-train's option named (issue 30 item 7), and
torchrun's agent options that ``isaaclab train_multigpu`` forwards have islab-train equivalents."""

from __future__ import annotations

import json

import pytest

from islab.cli.isaaclab_spelling import LAUNCHER_FLAGS, MAPPED_FLAGS, PRESET_FLAGS

pytestmark = pytest.mark.usefixtures("clean_environment")


def _refused(islab, *args) -> str:
    code, out, err = islab(*args)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert "did you mean --help" not in err.lower() and "No such option" not in err
    return err


@pytest.mark.parametrize(("typed", "named"), [
    (("--num_gpus", "4"), "--gpus N"),
    (("--nproc_per_node=2",), "--device cpu --nproc N"),
    (("--rl_library", "skrl"), "--lib {rl_games|rsl_rl|skrl}"),
    (("--headless",), "-- --viz"),
    (("--distributed",), "passes --distributed"),
    (("--num_envs", "64"), "--num-envs N"),
    (("--max_iterations", "5"), "--max-iterations N"),
    (("--node_rank", "1"), "--node-rank R"),
    (("--log_all_ranks",), "--all-ranks"),
    (("--virtual_local_rank",), "--virtual-local-rank"),
    (("--tee", "3"), "logs/rank_<R>.log"),
    (("--role", "trainer"), "[default<local rank>]"),
    (("--video",), "after --, e.g."),
])  # fmt: skip
def test_isaac_labs_spelling_names_islab_trains_option(islab, typed, named):
    err = _refused(islab, "--isaaclab", "auto", "--task", "Isaac-Cartpole", *typed, "--dry-run")
    assert err.startswith(f"error: {typed[0].split('=')[0]}: ") and named in err, err


def test_every_flag_of_the_table_is_answered(islab):
    for name in (*LAUNCHER_FLAGS, *MAPPED_FLAGS, *PRESET_FLAGS):
        _refused(islab, f"--{name}", "--dry-run")


def test_after_the_double_dash_and_in_subcommands_they_are_the_trainers(islab, tmp_path):
    # after --: the entry point's arguments, verbatim
    code, out, err = islab("--dry-run", "--json", "--device", "cpu", "--script", "train.py", "--", "--headless")
    assert code == 0 and json.loads(out)["nodes"][0]["argv"][-1] == "--headless", err
    # play's own --checkpoint is not Isaac Lab's
    code, _, err = islab("play", str(tmp_path), "--checkpoint", "best")
    assert "Isaac Lab" not in err


def test_an_isaac_lab_task_without_the_preset_names_the_preset(islab):
    err = _refused(islab, "--task", "Isaac-Cartpole-v0", "--dry-run")
    assert "--isaaclab auto" in err and "Isaac-Cartpole" in err and "did you mean 'Islab-Cartpole-v0'" not in err


def test_torchruns_agent_options_reach_torchrun_and_the_dry_run_lists_them_only_when_set(islab):
    code, out, err = islab("--dry-run", "--json", "--gpus", "2", "--virtual-local-rank", "--monitor-interval", "0.5",
                           "--start-method", "forkserver")  # fmt: skip
    assert code == 0, err
    argv = json.loads(out)["nodes"][0]["argv"]
    tail = argv[argv.index("--max_restarts") :]
    assert tail[:7] == ["--max_restarts", "0", "--monitor_interval", "0.5", "--start_method", "forkserver",
                        "--virtual_local_rank"]  # fmt: skip
    code, text, err = islab("--dry-run", "--gpus", "2")
    assert code == 0 and "virtual_local_rank" not in text and "start_method" not in text
    code, text, err = islab("--dry-run", "--gpus", "2", "--start-method", "spawn")
    assert code == 0 and "start_method           = spawn  (source: cli, --start-method)" in text


def test_a_chosen_start_method_is_not_overridden_by_forked_ranks():
    from datetime import datetime

    from islab.plan.plan import build_plan
    from islab.spec.run_spec import RunSpec

    forked = build_plan(RunSpec(device="cpu", nproc_per_node=2), now=datetime(2026, 1, 1), free_port=29999)
    chosen = build_plan(RunSpec(device="cpu", nproc_per_node=2, start_method="spawn"), now=datetime(2026, 1, 1),
                        free_port=29999)  # fmt: skip
    assert forked.forked_ranks and not chosen.forked_ranks
