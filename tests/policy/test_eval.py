"""``islab-train eval``: every kept checkpoint evaluated as ``play`` evaluates one, spread over processes.

The slow test evaluates the session's shared 1-rank rsl_rl run (conftest's ``one_rank_run``: two kept
checkpoints, iterations 1 and 2; copied, as eval writes into the run directory) with README's command:
two evaluation processes, one checkpoint each; its best agrees with a direct ``play`` of that
checkpoint, and ``play --checkpoint best`` then plays it. The rest needs no training: bad input (one
line, exit 2, nothing started), which checkpoints each ``--checkpoints`` form names, ``best`` by
evaluation, a crashed evaluation process, the summary's row on kept checkpoints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from paths import REPO

from islab import rundir
from islab.policy import eval_plan, eval_report, evaluate, play
from islab.run.formatting import summary_rows

PNG = b"\x89PNG\r\n\x1a\n"


def islab_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "islab.cli", *args], capture_output=True, text=True, timeout=600, check=False
    )


def readme_eval_command() -> list[str]:
    """README's ``islab-train eval <run> ...`` line, as argv (its ``<run>`` is filled in by the caller)."""
    (line,) = [line.strip() for line in (REPO / "README.md").read_text().splitlines()
               if line.strip().startswith("islab-train eval ")]  # fmt: skip
    return shlex.split(line.partition(" #")[0])[1:]


@pytest.mark.slow  # the session's shared 1-rank rsl_rl run (trained here when no other test did)
def test_eval_all_spreads_the_kept_checkpoints_over_two_processes_and_agrees_with_play(tmp_path, one_rank_run, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(one_rank_run("rsl_rl"), run_dir)
    argv = [str(run_dir) if arg == "<run>" else arg for arg in readme_eval_command()]
    assert argv[:2] == ["eval", str(run_dir)] and "--checkpoints" in argv and "all" in argv and "--json" in argv
    done = islab_train(*argv)
    assert done.returncode == 0, done.stderr[-3000:]
    evaluation = json.loads(done.stdout)
    assert json.loads(rundir.eval_path(run_dir).read_text()) == evaluation
    assert rundir.eval_plot_path(run_dir).read_bytes()[:8] == PNG

    kept = list(rundir.history_checkpoints(run_dir))
    entries = evaluation["checkpoints"]
    assert kept == [1, 2] and [entry["iteration"] for entry in entries] == kept  # every kept one, in order
    assert evaluation["processes"] == 2 and {entry["worker"] for entry in entries} == {0, 1}  # one each
    for entry in entries:
        assert set(entry) >= {"iteration", "mean_return", "std_return", "success_rate", "episode_length"}
        assert 0.0 <= entry["success_rate"] <= 1.0
        assert entry["checkpoint"] == f"checkpoints/iter_{entry['iteration']}.pt"
    best = evaluation["best"]
    assert best == max(entries, key=lambda entry: (entry["mean_return"], entry["iteration"]))
    assert evaluation["success_measure"].startswith("the episode reached its time limit")  # Cartpole's

    # a direct play of the best checkpoint, same episodes and envs: the same numbers. In this process
    # (what `islab-train play` runs in its child: play's main), which saves a second torch import.
    counts = ["--episodes", str(evaluation["episodes"]), "--num-envs", str(evaluation["num_envs"]), "--json"]
    capsys.readouterr()
    assert play.main([str(run_dir), "--checkpoint", str(run_dir / best["checkpoint"]), *counts]) == 0
    played = json.loads(capsys.readouterr().out)
    assert played["checkpoint_iteration"] == best["iteration"]
    assert played["return"]["mean"] == pytest.approx(best["mean_return"], abs=1e-9)
    assert played["return"]["std"] == pytest.approx(best["std_return"], abs=1e-9)
    assert played["length"]["mean"] == pytest.approx(best["episode_length"], abs=1e-9)
    assert played["success_rate"] == pytest.approx(best["success_rate"], abs=1e-9)

    # play --checkpoint best now means best by evaluation
    best_path, note = rundir.best_checkpoint(run_dir)
    assert best_path == run_dir / best["checkpoint"] and "islab-train eval" in note


# -- no training needed -------------------------------------------------------------------------


def fake_run(tmp_path: Path, checkpoints: tuple[str, ...] = (), spec: dict | None = None) -> Path:
    run_dir = tmp_path / "run"
    rundir.checkpoint_dir(run_dir).mkdir(parents=True)
    spec = spec or {"lib": "rsl_rl", "ml_framework": "torch", "task": "Islab-Cartpole-v0", "checkpoint_interval": 10}
    rundir.write_yaml(run_dir / rundir.SPEC_FILE, spec)
    rundir.write_yaml(run_dir / rundir.AGENT_FILE, {"seed": 1})
    for name in checkpoints:
        (rundir.checkpoint_dir(run_dir) / name).write_bytes(b"not read here")
    return run_dir


def test_bad_input_is_one_paragraph_and_exit_2_with_nothing_started(tmp_path, islab):
    empty = fake_run(tmp_path / "empty")
    kept = fake_run(tmp_path / "kept", ("iter_10.pt", "iter_20.pt", "latest.pt"))
    isaaclab = tmp_path / "isaaclab"
    isaaclab.mkdir()
    (isaaclab / rundir.LAUNCH_FILE).write_text(yaml.safe_dump(
        {"spec": {"isaaclab": "/opt/IsaacLab", "entrypoint": {"script": "train.py"}, "lib": "rsl_rl"}}))  # fmt: skip
    cases = [
        (("eval", str(kept), "--checkpoints", "newest"), "error: --checkpoints: 'newest' is not one of all, latest"),
        (("eval", str(kept), "--checkpoints", "every:0"), "error: --checkpoints: 'every:0': K in every:K"),
        (("eval", str(kept), "--checkpoints", "every:x"), "error: --checkpoints: 'every:x': K in every:K"),
        (("eval", str(kept), "--checkpoints", "every:7"), "error: --checkpoints: 'every:7' names none of the kept"),
        (("eval", str(empty)), "error: RUN_DIR: "),  # no checkpoint at all
        (("eval", str(tmp_path / "missing")), "error: RUN_DIR: "),
        (("eval", str(kept), "--episodes", "0"), "error: --episodes: must be at least 1"),
        (("eval", str(kept), "--nproc", "0"), "error: --nproc: must be at least 1"),
        (("eval", str(kept), "--device", "tpu"), "error: --device:"),
        (("eval", str(isaaclab)), "error: RUN_DIR: "),
    ]
    for args, start in cases:
        code, out, err = islab(*args)
        assert code == 2 and out == "", (args, out, err)
        assert err.startswith(start) and err.count("\n") == 1, (args, err)
    _, _, err = islab("eval", str(empty))
    assert "has no islab checkpoint to evaluate" in err and "--keep-checkpoints" in err, err
    _, _, err = islab("eval", str(isaaclab))
    assert "run of Isaac Lab's trainer" in err, err
    for run_dir in (empty, kept):
        assert not rundir.eval_path(run_dir).exists() and not rundir.logs_dir(run_dir).exists()


def test_each_checkpoints_form_names_kept_checkpoints_only(tmp_path):
    kept = {it: tmp_path / f"iter_{it}.pt" for it in (10, 20, 30, 40)}
    latest = tmp_path / "latest.pt"

    def iterations(form: str, best: Path | None = None, history=kept) -> list[int | None]:
        return [candidate.iteration for candidate in eval_plan.select(form, history, latest, best)]

    assert iterations("all") == [10, 20, 30, 40]
    assert iterations("latest") == [40]
    assert iterations("every:20") == [20, 40] and iterations("every:7") == []
    assert iterations("best", best=kept[20]) == [20]
    assert iterations("best", best=latest) == [40]  # best fell back to latest.pt: the newest kept one
    assert iterations("all", history={}) == [None] and iterations("every:2", history={}) == []  # keep 0
    assert eval_plan.parse_form("every:10") == ("every", 10)


def test_process_count_is_one_per_core_or_gpu_at_most_one_per_checkpoint():
    assert eval_plan.process_count(None, checkpoints=5, device="cpu", cores=2, gpus=0) == 2
    assert eval_plan.process_count(None, checkpoints=1, device="cpu", cores=16, gpus=0) == 1
    assert eval_plan.process_count(3, checkpoints=5, device="cpu", cores=2, gpus=0) == 3
    assert eval_plan.process_count(None, checkpoints=9, device="cuda", cores=64, gpus=4) == 4
    assert eval_plan.threads_per_process(16, 3) == 5 and eval_plan.threads_per_process(2, 4) == 1
    assert eval_plan.visible_gpu_ids("3, 5", 2) == ["3", "5"] and eval_plan.visible_gpu_ids(None, 2) == ["0", "1"]


def write_evaluation(run_dir: Path, best: str, mean_return: float) -> None:
    iteration = int(best.removeprefix("iter_").removesuffix(".pt"))
    entry = {"iteration": iteration, "mean_return": mean_return, "std_return": 0.0, "success_rate": None,
             "episode_length": 9.0, "checkpoint": f"checkpoints/{best}"}  # fmt: skip
    rundir.write_json(rundir.eval_path(run_dir), {"episodes": 32, "checkpoints": [entry], "best": entry})


def test_best_is_best_by_the_last_evaluation_while_its_checkpoint_is_kept(tmp_path):
    run_dir = fake_run(tmp_path, ("iter_10.pt", "iter_20.pt", "latest.pt"))
    for iteration, mean_return in ((10, 50.0), (20, 10.0)):  # training thought 10 best
        rundir.ProgressWriter(run_dir).append({"iteration": iteration, "mean_return": mean_return})
    assert rundir.best_checkpoint(run_dir)[0].name == "iter_10.pt"
    write_evaluation(run_dir, "iter_20.pt", 42.0)  # the evaluation found 20 better
    path, note = rundir.best_checkpoint(run_dir)
    assert path.name == "iter_20.pt" and note == "iteration 20, mean return 42.00 over 32 episodes in islab-train eval"
    newer = time.time() + 60  # written after the evaluation (an elastic restart redid it): not that policy
    os.utime(rundir.history_checkpoint(run_dir, 20), (newer, newer))
    assert rundir.best_checkpoint(run_dir)[0].name == "iter_10.pt"
    write_evaluation(run_dir, "iter_5.pt", 99.0)  # no longer kept
    assert rundir.best_checkpoint(run_dir)[0].name == "iter_10.pt"


def test_a_crashed_evaluation_process_fails_its_checkpoint_and_the_others_take_the_rest(tmp_path):
    """Real processes: process 0 dies at once; process 1 answers every checkpoint handed to it."""
    candidates = [eval_plan.Candidate(it, tmp_path / f"iter_{it}.pt") for it in (1, 2, 3)]
    answer = ("import json, sys\nfor line in sys.stdin:\n    print(json.dumps({'checkpoint': line.strip(), "
              "'worker': 1}), flush=True)")  # fmt: skip
    commands = {0: [sys.executable, "-c", "import sys; sys.exit(3)"], 1: [sys.executable, "-c", answer]}
    answers = evaluate.run_workers(tmp_path, candidates, commands.__getitem__, [dict(os.environ)] * 2, lambda _: None)
    failed = [entry for entry in answers if "error" in entry]
    assert len(answers) == 3 and len(failed) == 1 and failed[0]["crashed"]
    assert "was not evaluated: evaluation process 0 exited with status 3" in failed[0]["error"]["problem"]
    assert rundir.eval_worker_log(tmp_path, 0).is_file()
    dying = [sys.executable, "-c", "import sys; sys.exit(3)"]
    answers = evaluate.run_workers(tmp_path, candidates, lambda _: dying, [dict(os.environ)] * 2, lambda _: None)
    assert len(answers) == 3 and all(entry["crashed"] for entry in answers)  # none lost, none evaluated


def test_eval_png_and_table_mark_the_best(tmp_path):
    entries = [{"iteration": it, "mean_return": r, "std_return": 1.0, "success_rate": s, "episode_length": 50.0,
                "checkpoint": f"checkpoints/iter_{it}.pt", "worker": 0, "wall_s": 1.0}
               for it, r, s in ((10, 20.0, 0.1), (20, 80.0, 0.9), (30, 60.0, 0.5))]  # fmt: skip
    evaluation = {"run_dir": str(tmp_path), "lib": "rsl_rl", "ml_framework": "torch", "task": "Islab-Cartpole-v0",
                  "episodes": 8, "num_envs": 8, "device": "cpu", "processes": 2, "success_measure": "reached the end",
                  "checkpoints": entries, "best": evaluate.best_of(entries)}  # fmt: skip
    assert evaluation["best"]["iteration"] == 20
    plot = eval_report.draw(evaluation, [{"iteration": it, "mean_return": it / 2} for it in range(1, 31)],
                            rundir.eval_plot_path(tmp_path))  # fmt: skip
    assert plot is not None and plot.read_bytes()[:8] == PNG and not list(tmp_path.glob(".*tmp*"))
    table = eval_report.render(evaluation, plot)
    (marked,) = [line for line in table.splitlines() if "<- best" in line]
    assert re.match(r"\s+20\s+80\.00", marked), table


def test_the_summary_says_only_kept_checkpoints_can_be_evaluated():
    rows = dict(summary_rows({"checkpoint": "/r/checkpoints/latest.pt"}, "/r", None, kept=[30, 40, 50]))
    kept = rows["kept checkpoints"]
    assert kept.startswith("iterations 30, 40, 50 (only kept ones can be evaluated: islab-train eval"), kept
    assert "--keep-checkpoints N keeps more" in rows["kept checkpoints"]
    assert "kept checkpoints" not in dict(summary_rows({}, "/r", None, kept=[]))  # no checkpoint: no row


def test_quadcopter_success_is_hovering_at_the_goal_when_time_runs_out():
    """Three drones on the last step of their episode, hovering: at the goal (success), 1 m from it
    (no success), and at the goal but below the height band (died: no success)."""
    import torch

    from islab.tasks.quadcopter.quadcopter_env import SUCCESS_DISTANCE, QuadcopterEnv, QuadcopterEnvCfg

    env = QuadcopterEnv(QuadcopterEnvCfg(num_envs=3, seed=0))
    env.reset()
    env.root_state.zero_()
    env.root_quat_w[:, 0] = 1.0
    env.desired_pos_w[:] = torch.tensor([0.5, 0.5, 1.0])
    env.desired_pos_w[2, 2] = 0.05  # a goal below the band: reaching it kills the drone
    env.root_pos_w[:] = env.desired_pos_w
    env.root_pos_w[1, 0] += 1.0
    env.episode_length_buf[:] = env.max_episode_length - 1
    hover = 2.0 / env.cfg.thrust_to_weight - 1.0
    _, _, terminated, truncated, _ = env.step(torch.tensor([hover, 0.0, 0.0, 0.0]).expand(3, 4))
    assert truncated.tolist() == [True, True, True] and terminated.tolist() == [False, False, True]
    assert env.episode_success(terminated, truncated).tolist() == [True, False, False]
    assert env.final_distance_to_goal[0] < SUCCESS_DISTANCE < env.final_distance_to_goal[1]
