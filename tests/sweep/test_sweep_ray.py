"""``islab-train sweep`` for real: an embedded Ray, Tune, and trials that are real islab-train runs
(our worker training rsl_rl Cartpole on CPU ranks over gloo), driven as a user would, in a
subprocess -- so Ctrl-C is a real SIGINT and "no process left behind" is checked on the real
process tree (psutil).

Each test starts one sweep process (one Ray session); trials are kept tiny (16 envs, a few
iterations) since most of a trial's time is starting islab-train, torchrun and the worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from netns import alive, collect_tree, kill_all, wait_until
from paths import SRC

pytestmark = [pytest.mark.slow, pytest.mark.needs("ray", "optuna", "psutil")]

RUN = {"lib": "rsl_rl", "device": "cpu", "nproc_per_node": 1, "num_envs": 16, "max_iterations": 6}
TRIAL_FIELDS = {"id", "config", "seed", "status", "metric", "run_dir", "log", "start", "end", "node"}
CONFIG_FIELDS = {"config", "metric_mean", "metric_std", "seeds", "finished"}


def write_sweep(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"run": RUN, "cpus_per_trial": 1, **fields}), encoding="utf-8")
    return path


def sweep_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "islab.cli", "sweep", *args]


def sweep_dir_of(tmp_path: Path) -> Path:
    found = sorted((tmp_path / "logs" / "sweeps").glob("*/*"))
    assert len(found) == 1, found
    return found[0]


def overlap(a: dict, b: dict) -> bool:
    return max(a["start"], b["start"]) < min(a["end"], b["end"])


def test_grid_sweep_trains_two_at_a_time_reports_a_failed_trial_and_summarizes(tmp_path):
    """2 configurations x 2 seeds train for real, 2 trials at a time; a third configuration whose
    learning rate is negative fails at run time (torch's Adam refuses it; a value that is not a number
    would be refused before anything starts): it is reported, the others finish, exit 1."""
    path = write_sweep(
        tmp_path,
        seeds=2,
        search={"algorithm.learning_rate": [1.0e-3, 3.0e-3, -1.0]},
        metric={"name": "mean_return", "mode": "max", "over_last": 3},
        max_concurrent=2,
    )
    result = subprocess.run(
        sweep_command(str(path), "--json"), capture_output=True, text=True, cwd=tmp_path, timeout=900
    )
    assert result.returncode == 1, result.stderr[-4000:]
    sweep_dir = sweep_dir_of(tmp_path)
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert json.loads(result.stdout) == summary  # --json prints sweep.json's content

    trials = {trial["id"]: trial for trial in summary["trials"]}
    assert set(trials) == {f"c{c:02d}-s{s}" for c in range(3) for s in (1, 2)}
    for trial in trials.values():
        assert set(trial) >= TRIAL_FIELDS, trial
        assert trial["node"]
    finished = [trials[f"c{c:02d}-s{s}"] for c in (0, 1) for s in (1, 2)]
    assert all(t["status"] == "finished" and isinstance(t["metric"], float) for t in finished), finished
    for trial in finished:
        progress = [json.loads(line) for line in (Path(trial["run_dir"]) / "progress.jsonl").read_text().splitlines()]
        assert len(progress) == RUN["max_iterations"]  # trained for real, to the end
        expected = sum(record["mean_return"] for record in progress[-3:]) / 3
        assert trial["metric"] == pytest.approx(expected)  # the mean of the last over_last iterations
        assert Path(trial["run_dir"]).is_relative_to(sweep_dir / "trials" / trial["id"])
    # two at a time: the trials of a pair overlap in time, and never more than two ran at once
    assert overlap(trials["c00-s1"], trials["c00-s2"]) and overlap(trials["c01-s1"], trials["c01-s2"])
    everything = list(trials.values())
    for trial in everything:
        at_once = [other for other in everything if other is not trial and overlap(trial, other)]
        assert not any(overlap(a, b) for a in at_once for b in at_once if a is not b), "3 trials at once"

    for failed in (trials["c02-s1"], trials["c02-s2"]):
        assert failed["status"] == "failed" and failed["exit_code"] not in (0, None)
        assert failed["error"] and "Invalid learning rate" in failed["error"]
        assert Path(failed["log"]).is_file()
    assert "failed" in (sweep_dir / "summary.md").read_text()

    configs = summary["configs"]
    assert all(set(config) >= CONFIG_FIELDS for config in configs)
    assert [config["finished"] for config in configs] == [2, 2, 0]  # best first; the failed one last
    assert configs[0]["metric_mean"] >= configs[1]["metric_mean"]
    assert configs[0]["seeds"] == [1, 2]
    best = summary["best"]
    assert best["config"] == configs[0]["config"] and best["metric_mean"] == configs[0]["metric_mean"]
    assert "islab-train" in best["command"] and "--seed 1" in best["command"]
    assert (sweep_dir / "summary.md").read_text().count("learning_rate=") >= 3
    assert (sweep_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _sweep_processes(root: Path) -> list[psutil.Process]:
    """Processes whose command line names the sweep's directory (trials, ranks), wherever they are now."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if str(root) in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def test_ctrl_c_stops_every_process_and_resume_finishes_the_rest(tmp_path):
    """Ctrl-C once one trial has finished and the other trains (iteration <= 10 of 25). Nothing of the sweep
    is left running (trials, ranks, Ray); --resume keeps the finished trial and continues the other from
    the checkpoint its SIGTERM left, to its 25th iteration."""
    # A short trial (4 steps per env and iteration), then a long one (48): Ctrl-C while the long one trains.
    path = write_sweep(
        tmp_path,
        search={"num_steps_per_env": [4, 48]},
        max_concurrent=1,
        run={**RUN, "max_iterations": 25, "num_envs": 32},
    )
    sweep = subprocess.Popen(
        sweep_command(str(path)), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: dict[int, psutil.Process] = {}
    try:

        def finished_one_and_third_trains() -> bool:
            collect_tree(sweep.pid, seen)
            assert sweep.poll() is None, sweep.stdout.read()
            trials = tmp_path.glob("logs/sweeps/*/*/trials/*")
            records = [trial for trial in trials if (trial / "trial.json").exists()]
            training = [  # under way, and far from its last iteration
                trial
                for trial in tmp_path.glob("logs/sweeps/*/*/trials/*")
                if not (trial / "trial.json").exists()
                and any(1 <= len(p.read_text().splitlines()) <= 10 for p in trial.glob("*/*/*/progress.jsonl"))
            ]
            return len(records) >= 1 and len(training) >= 1

        wait_until(finished_one_and_third_trains, 900, "one finished trial and one training", interval_s=0.3)
        collect_tree(sweep.pid, seen)
        assert any("raylet" in " ".join(p.cmdline()) for p in alive(seen)), "Ray runs under the sweep"
        sweep_dir = sweep_dir_of(tmp_path)
        before = {trial.parent.name: json.loads(trial.read_text()) for trial in sweep_dir.glob("trials/*/trial.json")}
        sweep.send_signal(signal.SIGINT)
        output, _ = sweep.communicate(timeout=120)
        assert sweep.returncode == 130, output[-4000:]
        assert "--resume" in output
        deadline = time.monotonic() + 15
        while (alive(seen) or _sweep_processes(sweep_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(seen), [" ".join(p.cmdline())[:200] for p in alive(seen)]
        assert not _sweep_processes(sweep_dir)
    finally:
        if sweep.poll() is None:
            sweep.kill()
        kill_all(seen)

    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert len([t for t in summary["trials"] if t["status"] == "finished"]) == len(before) == 1

    resumed = subprocess.run(
        sweep_command("--resume", str(sweep_dir)), capture_output=True, text=True, cwd=tmp_path, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    trials = {trial["id"]: trial for trial in summary["trials"]}
    assert sorted(trials) == ["c00-s1", "c01-s1"]
    assert all(trial["status"] == "finished" for trial in trials.values())
    for ident, record in before.items():  # kept, not run again
        assert trials[ident]["start"] == record["start"] and trials[ident]["end"] == record["end"]
    continued = [t for t in trials.values() if t.get("resumed_from")]
    assert continued, "the interrupted trial continues from the checkpoint its SIGTERM left"
    for trial in continued:
        progress = (Path(trial["run_dir"]) / "progress.jsonl").read_text().splitlines()
        assert json.loads(progress[-1])["iteration"] == 25


def test_optuna_with_asha_runs_its_samples_and_stops_within_bounds(tmp_path):
    path = write_sweep(
        tmp_path,
        seeds=1,
        search={"algorithm.learning_rate": {"loguniform": [1.0e-4, 1.0e-2]}, "algorithm.entropy_coef": [0.0, 0.01]},
        searcher="optuna",
        samples=3,
        scheduler="asha",
        asha={"grace_period": 2, "reduction_factor": 2},
        max_concurrent=2,
        run={**RUN, "max_iterations": 6},
    )
    result = subprocess.run(sweep_command(str(path)), capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((sweep_dir_of(tmp_path) / "sweep.json").read_text())
    assert len(summary["trials"]) == 3
    for trial in summary["trials"]:
        assert trial["status"] == "finished"
        assert 1.0e-4 <= trial["config"]["algorithm.learning_rate"] <= 1.0e-2
        assert trial["config"]["algorithm.entropy_coef"] in (0.0, 0.01)
        assert "algorithm.learning_rate=" in trial["command"] and "algorithm.entropy_coef=" in trial["command"]
    assert summary["best"]["config"] == summary["configs"][0]["config"]
    assert "algorithm.learning_rate=" in summary["best"]["command"]


@pytest.fixture(autouse=True)
def _no_ray_address(monkeypatch):
    """The sweep starts its own embedded Ray, whatever the developer's shell says."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
    )
