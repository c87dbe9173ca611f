"""``islab-train sweep`` before anything runs: SWEEP.yaml's schema, the trial plan, the dry run, bad
input (exit 2, nothing started) and the missing ``[sweep]`` extra. No Ray, no training: fast.

The real runs (Ray, trials training) are in tests/sweep/test_sweep_ray.py.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from paths import FIXTURES, REPO

from islab.spec.agent_config import parse_override
from islab.sweep.curves import config_band
from islab.sweep.driver import optuna_history
from islab.sweep.load import parse_sweep
from islab.sweep.schema import SweepSpec
from islab.sweep.summary import summarize
from islab.sweep.trial_process import find_run_dir
from islab.sweep.trials import configurations, draw, override_text

EXAMPLE = REPO / "configs" / "sweeps" / "cartpole-lr.yaml"

BASE = {
    "run": {"lib": "rsl_rl", "device": "cpu", "nproc_per_node": 1, "num_envs": 16, "max_iterations": 3},
    "seeds": 2,
    "search": {"algorithm.learning_rate": [1.0e-3, 3.0e-3]},
    "cpus_per_trial": 1,
}


def write_sweep(tmp_path: Path, **changes) -> Path:
    data = {**BASE, **changes}
    data = {key: value for key, value in data.items() if value is not None}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def in_tmp(tmp_path, monkeypatch, clean_environment):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- the plan (pure) -----------------------------------------------------------------------------


def test_grid_times_seeds_gives_every_configuration_with_every_seed():
    spec = parse_sweep({**BASE, "seeds": [7, 9], "search": {"a.x": [1, 2, 3], "a.y": ["p", "q"]}}, "s.yaml")
    configs = configurations(spec)
    assert configs == [{"a.x": x, "a.y": y} for x in (1, 2, 3) for y in ("p", "q")]
    assert spec.seed_list == [7, 9]
    assert parse_sweep({**BASE, "seeds": 3}, "s.yaml").seed_list == [1, 2, 3]


def test_distributions_are_drawn_within_bounds_reproducibly_and_samples_per_grid_point():
    search = {"a.lr": [1, 2], "a.ent": {"loguniform": [1.0e-4, 1.0e-2]}, "a.n": {"randint": [2, 5]}}
    spec = parse_sweep({**BASE, "search": search, "samples": 3}, "s.yaml")
    configs = configurations(spec)
    assert len(configs) == 2 * 3  # grid points x samples
    assert all(1.0e-4 <= c["a.ent"] <= 1.0e-2 and c["a.n"] in (2, 3, 4) for c in configs)
    assert configs == configurations(spec)  # the same file gives the same plan (--resume relies on it)
    other = parse_sweep({**BASE, "search": search, "samples": 3, "search_seed": 1}, "s.yaml")
    assert configurations(other) != configs
    random_spec = parse_sweep({**BASE, "search": search, "samples": 5, "searcher": "random"}, "s.yaml")
    assert len(configurations(random_spec)) == 5
    assert all(c["a.lr"] in (1, 2) for c in configurations(random_spec))


@pytest.mark.parametrize("value", [3.0e-4, 1.0e-3, 0.5, 7, True, "elu", [32, 32]])
def test_override_text_reads_back_as_the_same_value(value):
    key, parsed = parse_override(override_text("algorithm.x", value))
    assert (key, parsed) == ("algorithm.x", value)


def test_uniform_draws_stay_inside_their_bounds():
    space = SweepSpec.model_validate({**BASE, "search": {"a.b": {"uniform": [0.2, 0.3]}}}).search["a.b"]
    rng = random.Random(0)
    assert all(0.2 <= draw(space, rng) <= 0.3 for _ in range(200))


# -- the dry run ----------------------------------------------------------------------------------


def test_dry_run_lists_every_trial_paste_safe_and_starts_nothing(in_tmp, islab):
    path = write_sweep(in_tmp, run={**BASE["run"], "env": {"NOTE": "a b'c"}})
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    code, out, err = islab("sweep", str(path), "--dry-run")
    assert code == 0, err
    assert {child.pid for child in psutil.Process().children(recursive=True)} <= before
    assert not (in_tmp / "logs").exists()  # not even the sweep directory
    commands = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 4
    assert all(line.startswith("# ") for line in out.splitlines() if line and line not in commands)
    for number, line in enumerate(commands):
        words = shlex.split(line)
        assert words[:2] == ["NOTE=a b'c", "ISLAB_THREADS_PER_RANK=1"]
        assert words[2] == "islab-train"
        assert f"--seed {1 + number % 2}" in line
    # a printed command is one islab-train accepts as it stands
    words = shlex.split(commands[3])
    code, plan_out, err = islab(*words[3:], "--dry-run", "--json")
    assert code == 0, err
    assert "algorithm.learning_rate=0.003" in " ".join(json.loads(plan_out)["nodes"][0]["argv"])


def test_dry_run_json_names_config_seed_resources_and_argv(in_tmp, islab):
    code, out, err = islab("sweep", str(write_sweep(in_tmp, cpus_per_trial=2)), "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    trials = plan["trials"]
    assert [(t["config"]["algorithm.learning_rate"], t["seed"]) for t in trials] == [
        (1.0e-3, 1), (1.0e-3, 2), (3.0e-3, 1), (3.0e-3, 2),
    ]  # fmt: skip
    assert all(t["resources"] == {"cpu": 2.0, "gpu": 0.0} for t in trials)
    assert trials[0]["argv"][:3] == [sys.executable, "-m", "islab.cli"]
    assert trials[0]["env"]["ISLAB_THREADS_PER_RANK"] == "2"
    assert len({t["id"] for t in trials}) == 4


def test_the_example_sweep_plans():
    result = subprocess.run(
        [sys.executable, "-m", "islab.cli", "sweep", str(EXAMPLE), "--dry-run", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["trials"]) == 9


def test_dry_run_imports_neither_torch_nor_ray(tmp_path):
    path = write_sweep(tmp_path)
    probe = (
        "import sys; from islab import cli; "
        f"assert cli.run(['sweep', {str(path)!r}, '--dry-run']) == 0; "
        "heavy = [m for m in ('torch', 'ray', 'optuna', 'numpy') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


# -- Isaac Lab's trainer: Hydra keys and --task, as Isaac Lab's Ray tuner searches ------------------

TREE = FIXTURES / "isaaclab_tree"
ISAACLAB_RUN = {"isaaclab": str(TREE), "task": "Isaac-Cartpole-v0", "device": "cpu", "num_envs": 8, "max_iterations": 3}
TASKS = ["Isaac-Cartpole-v0", "Isaac-Cartpole-Direct-v0"]


def test_an_isaaclab_sweep_searches_hydra_keys_and_tasks_each_trial_in_its_own_directory(in_tmp, islab):
    search = {"task": TASKS, "agent.algorithm.learning_rate": [1.0e-3, 1.0e-2]}
    path = write_sweep(in_tmp, run={**ISAACLAB_RUN, "args": ["physics=newton"]}, seeds=1, search=search)
    code, out, err = islab("sweep", str(path), "--dry-run", "--json")
    assert code == 0, err
    trials = json.loads(out)["trials"]
    assert len(trials) == 4
    for trial in trials:
        argv, config = trial["argv"], trial["config"]
        assert argv[argv.index("--task") + 1] == config["task"] and argv.count("--task") == 1
        # the Hydra override goes to Isaac Lab's train.py, after the run's own arguments
        lr = override_text("agent.algorithm.learning_rate", config["agent.algorithm.learning_rate"])
        assert argv[argv.index("--") :] == ["--", "physics=newton", lr]
        # its own working directory (Isaac Lab writes ./logs/rsl_rl there), which the command enters
        assert trial["cwd"] == argv[argv.index("--log-dir") + 1] and trial["cwd"].endswith(trial["id"])
        assert trial["command"].startswith(f"cd {shlex.quote(trial['cwd'])} && ")
        # the trial's own command line plans what its configuration says
        words = shlex.split(trial["command"].partition(" && ")[2])
        code, plan, err = islab("--dry-run", "--json", *words[words.index("islab-train") + 1 :])
        assert code == 0, err
        rank_argv = json.loads(plan)["nodes"][0]["argv"]
        assert rank_argv[rank_argv.index("--task") + 1] == config["task"] and rank_argv[-1] == lr
    assert not (in_tmp / "logs").exists()


@pytest.mark.parametrize(
    "run, search, field, hint",
    [
        (ISAACLAB_RUN, {"algorithm.learning_rate": [1.0e-3]}, "search.algorithm.learning_rate", "agent."),
        (ISAACLAB_RUN, {"task": ["Isaac-Cartpol-v0"]}, "search.task", "Did you mean Isaac-Cartpole-v0?"),
        (
            {"mjlab": True, "task": "Mjlab-Cartpole-Balance", "device": "cpu"},
            {"agent.algorithm.learning_rate": [1.0e-3]},
            "search.agent.algorithm.learning_rate",
            "mjlab",
        ),
    ],
    ids=["not a Hydra key", "unknown task", "mjlab"],
)
def test_a_search_key_the_entry_point_cannot_take_exits_2(in_tmp, islab, run, search, field, hint):
    code, _out, err = islab("sweep", str(write_sweep(in_tmp, run=run, seeds=1, search=search)), "--dry-run")
    assert code == 2 and field in err and hint in err, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


# -- bad input: exit 2, one line naming the field, nothing started ---------------------------------

BAD = {
    "unknown top-level key": ({"seed": 3}, "sweep.yaml: seed: unknown key", "did you mean 'seeds'?"),
    "unknown metric key": ({"metric": {"nam": "x"}}, "sweep.yaml: metric.nam: unknown key", "name"),
    "override key the agent config lacks": (
        {"search": {"algorithm.learnin_rate": [1.0e-3]}},
        "sweep.yaml: search.algorithm.learnin_rate: the agent config has no key 'algorithm.learnin_rate'",
        "algorithm.learning_rate",
    ),
    "unknown run field": ({"run": {**BASE["run"], "num_env": 4}}, "run.num_env", "num_envs"),
    "loguniform from zero": (
        {"search": {"algorithm.entropy_coef": {"loguniform": [0, 0.01]}}},
        "sweep.yaml: search.algorithm.entropy_coef",
        "positive",
    ),
    "bounds reversed": (
        {"search": {"algorithm.entropy_coef": {"uniform": [0.5, 0.1]}}},
        "sweep.yaml: search.algorithm.entropy_coef",
        "low must be below high",
    ),
    "two distributions in one": (
        {"search": {"algorithm.entropy_coef": {"uniform": [0.1, 0.5], "randint": [1, 3]}}},
        "sweep.yaml: search.algorithm.entropy_coef",
        "exactly one",
    ),
    "seed in the base run": ({"run": {**BASE["run"], "seed": 3}}, "sweep.yaml: run.seed", "seeds:"),
    "multi-node trial": ({"run": {**BASE["run"], "nnodes": 2}}, "sweep.yaml: run.nnodes", "one-node"),
    "samples with a pure grid": ({"samples": 4}, "sweep.yaml: samples", "distribution"),
    "unknown searcher": ({"searcher": "bayes"}, "sweep.yaml: searcher", "optuna"),
    "repeated seed": ({"seeds": [1, 1]}, "sweep.yaml: seeds", "once"),
}


@pytest.mark.parametrize("changes, field, hint", BAD.values(), ids=BAD.keys())
def test_bad_sweep_file_exits_2_naming_the_field(in_tmp, islab, changes, field, hint):
    for dry_run in (["--dry-run"], []):
        code, _out, err = islab("sweep", str(write_sweep(in_tmp, **changes)), *dry_run)
        assert code == 2, err
        assert field in err and hint in err, err
        assert err.startswith("error: ") and "Traceback" not in err
        assert not (in_tmp / "logs").exists()


RESOURCES = {
    "fractional GPUs above one": (
        {"device": "cuda", "nproc_per_node": 2},
        {"trials_per_gpu": 0.3},
        "0,1,2,3,4,5,6,7",
        "whole GPUs",
    ),
    "more GPUs than the machine has": ({"device": "cuda", "nproc_per_node": 2}, {"trials_per_gpu": 0.5}, "0", "has 1"),
    "ranks sharing a GPU": ({"device": "cuda", "nproc_per_node": 2}, {"trials_per_gpu": 2}, "0,1", "share"),
    "more cores than the machine has": ({}, {"cpus_per_trial": 4096}, "", "cpus_per_trial"),
}


@pytest.mark.parametrize("run, changes, gpus, hint", RESOURCES.values(), ids=RESOURCES.keys())
def test_trials_that_cannot_fit_the_machine_exit_2_before_ray_starts(
    in_tmp, islab, monkeypatch, run, changes, gpus, hint
):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)
    path = write_sweep(in_tmp, run={**BASE["run"], **run}, **changes)
    code, _out, err = islab("sweep", str(path))
    assert code == 2, err
    assert hint in err and "sweep.yaml: " in err, err
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()
    assert not (in_tmp / "logs").exists()


def test_without_the_sweep_extra_it_names_the_extra_and_exits_2(in_tmp, islab, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # find_spec reports it missing
    code, _out, err = islab("sweep", str(write_sweep(in_tmp)))
    assert code == 2
    assert "[sweep]" in err and '-e ".[sweep]"' in err, err
    assert not (in_tmp / "logs").exists()
    code, _out, err = islab("sweep", str(write_sweep(in_tmp)), "--dry-run")  # the dry run needs no Ray
    assert code == 0, err


def test_two_sweeps_of_one_file_in_the_same_second_get_a_directory_each(in_tmp):
    """Issue 30 item 1: the sweep directory is named to the second; a second sweep that planned the
    same one claims ``<name>-2``, and its trials' run directories move with it."""
    from islab.sweep.command import claim_sweep_dir
    from islab.sweep.load import load_sweep
    from islab.sweep.trials import build_plan

    loaded = load_sweep(write_sweep(in_tmp))
    planned = build_plan(loaded.spec, sweep_dir=str(in_tmp / "logs" / "sweeps" / "s" / "2026-01-01_12-00-00"),
                         python=sys.executable, device="cpu", nproc_per_node=1, cluster_file=None)  # fmt: skip
    first, second = claim_sweep_dir(loaded, planned), claim_sweep_dir(loaded, planned)
    assert first.sweep_dir == planned.sweep_dir and second.sweep_dir == f"{planned.sweep_dir}-2"
    for plan in (first, second):
        assert Path(plan.sweep_dir).is_dir()
        assert all(Path(trial.log_dir).is_relative_to(plan.sweep_dir) for trial in plan.trials)
        assert all(plan.sweep_dir + "/" in " ".join(trial.argv) for trial in plan.trials)


def _planned(tmp_path: Path):
    from islab.sweep.trials import build_plan

    spec = parse_sweep(BASE, "s.yaml")
    return build_plan(spec, sweep_dir=str(tmp_path / "sweep"), python=sys.executable, device="cpu",
                      nproc_per_node=1, cluster_file=None)  # fmt: skip


def test_remaining_is_the_trials_without_an_ending():
    """Issue 30, a planted bug that survived: ``remaining`` returning every trial on --resume. The
    trials still to run are those with no record or one that did not end (a trial cut off mid-run);
    finished and failed ones are done."""
    from islab.sweep.driver import remaining

    plan = _planned(Path("/nowhere"))
    ids = [trial.id for trial in plan.trials]
    assert len(ids) == 4
    assert remaining(plan, {}) == list(plan.trials)  # a new sweep: all of them
    records = {ids[0]: {"status": "finished"}, ids[1]: {"status": "failed"}, ids[2]: {"status": "running"}}
    assert [trial.id for trial in remaining(plan, records)] == ids[2:]
    assert remaining(plan, {ident: {"status": "finished"} for ident in ids}) == []


@pytest.mark.needs("ray", "optuna")  # the command checks for the [sweep] extra before it looks
def test_resuming_a_sweep_whose_trials_all_ended_starts_no_ray(in_tmp):
    """Issue 30: resuming an ended sweep writes its summary again and exits with its status without
    importing Ray (which started Ray and Tune for nothing: 14.0 s instead of 3.2 s)."""
    from islab.sweep.command import STATE_FILE, SWEEP_COPY
    from islab.sweep.summary import SWEEP_JSON, write_record

    plan = _planned(in_tmp)
    sweep_dir = Path(plan.sweep_dir)
    sweep_dir.mkdir()
    (sweep_dir / SWEEP_COPY).write_text(yaml.safe_dump(BASE), encoding="utf-8")
    state = {"name": "s", "cwd": str(in_tmp), "cluster_file": None, "python": sys.executable, "source": "s.yaml"}
    (sweep_dir / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    for number, trial in enumerate(plan.trials):
        write_record(sweep_dir, {"id": trial.id, "config": trial.config, "seed": trial.seed, "status": "finished",
                                 "metric": float(number), "curve": [[1, float(number)]]})  # fmt: skip
    report_ray = "import atexit, sys; atexit.register(lambda: print('ray imported:', 'ray' in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", f"{report_ray}; from islab.cli import run; sys.exit(run(sys.argv[1:]))",
         "sweep", "--resume", str(sweep_dir)],
        capture_output=True, text=True, timeout=120, cwd=in_tmp,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ray imported: False" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(json.loads((sweep_dir / SWEEP_JSON).read_text())["trials"]) == len(plan.trials)


def test_resume_of_a_directory_that_is_no_sweep_exits_2(in_tmp, islab):
    code, _out, err = islab("sweep", "--resume", str(in_tmp))
    assert code == 2 and "--resume" in err and "sweep-state.json" in err, err


# -- the summary (pure) ---------------------------------------------------------------------------


def _record(ident, config, seed, status, metric, curve=()):
    return {"id": ident, "config": config, "seed": seed, "status": status, "metric": metric, "curve": list(curve)}


def test_summary_groups_seeds_ranks_configs_and_names_the_best_command():
    records = [
        _record("c00-s1", {"lr": 1}, 1, "finished", 10.0),
        _record("c00-s2", {"lr": 1}, 2, "finished", 20.0),
        _record("c01-s1", {"lr": 2}, 1, "finished", 30.0),
        _record("c01-s2", {"lr": 2}, 2, "failed", None),
        _record("c02-s1", {"lr": 3}, 1, "failed", None),
    ]
    result = summarize(records, mode="max", commands={"c01-s1": "islab-train --seed 1 lr=2"})
    assert [c["config"] for c in result["configs"]] == [{"lr": 2}, {"lr": 1}, {"lr": 3}]
    assert result["configs"][1]["metric_mean"] == 15.0 and result["configs"][1]["metric_std"] == 5.0
    assert result["configs"][0]["finished"] == 1 and result["configs"][0]["seeds"] == [1, 2]
    assert result["configs"][2]["metric_mean"] is None
    assert result["best"] == {"config": {"lr": 2}, "metric_mean": 30.0, "command": "islab-train --seed 1 lr=2"}
    lowest = summarize(records, mode="min", commands={})
    assert lowest["configs"][0]["config"] == {"lr": 1}


def test_curve_band_spans_the_seeds_min_to_max():
    steps, mean, low, high = config_band([[[100, 1.0], [200, 3.0]], [[100, 3.0], [200, 5.0], [300, 9.0]]])
    assert steps == [100, 200] and mean == [2.0, 4.0] and low == [1.0, 3.0] and high == [3.0, 5.0]


# -- resuming (pure) -------------------------------------------------------------------------------


def test_optuna_history_tells_configurations_whose_seeds_all_ended_and_lists_the_unfinished():
    """What a resumed Optuna sweep tells its new study (mean of the finished seeds; None when every
    seed failed) and proposes first (started, or partly ended)."""
    records = {
        "oa-s1": _record("oa-s1", {"lr": 1}, 1, "finished", 10.0),
        "oa-s2": _record("oa-s2", {"lr": 1}, 2, "finished", 20.0),
        "ob-s1": _record("ob-s1", {"lr": 2}, 1, "finished", 30.0),
        "ob-s2": _record("ob-s2", {"lr": 2}, 2, "failed", None),
        "oc-s1": _record("oc-s1", {"lr": 3}, 1, "failed", None),
        "oc-s2": _record("oc-s2", {"lr": 3}, 2, "failed", None),
        "od-s1": _record("od-s1", {"lr": 4}, 1, "finished", 5.0),  # od-s2 interrupted
    }
    started = {ident: {"id": ident, "config": r["config"], "seed": r["seed"]} for ident, r in records.items()}
    started["od-s2"] = {"id": "od-s2", "config": {"lr": 4}, "seed": 2}
    started["oe-s1"] = {"id": "oe-s1", "config": {"lr": 5}, "seed": 1}  # interrupted before its second seed
    history = optuna_history(started, records, [1, 2])
    assert history.told == [({"lr": 1}, 15.0), ({"lr": 2}, 30.0), ({"lr": 3}, None)]
    assert history.unfinished == [{"lr": 4}, {"lr": 5}]
    assert optuna_history({}, {}, [1]).told == [] == optuna_history({}, {}, [1]).unfinished


def test_a_trial_started_again_reads_its_new_run_directory_not_the_one_an_earlier_attempt_left(tmp_path):
    """A trial stopped before its first checkpoint starts again in a new run directory next to the
    old one (same trial directory): its progress is the new one's."""
    old, new = tmp_path / "rsl_rl" / "Task" / "t1", tmp_path / "rsl_rl" / "Task" / "t2"
    for run_dir in (old, new):
        run_dir.mkdir(parents=True)
        (run_dir / "launch.yaml").write_text("{}\n")
    os.utime(old / "launch.yaml", (1, 1))  # the older one
    assert find_run_dir(tmp_path) == new
    assert find_run_dir(tmp_path, besides=[new]) == old
    assert find_run_dir(tmp_path, besides=[old, new]) is None


@pytest.mark.parametrize(
    ("environ", "token_file", "mode"),
    [
        ({}, True, "token"),  # ~/.ray/auth_token, as `ray start --head` finds it
        ({"RAY_AUTH_TOKEN_PATH": "/run/secrets/ray"}, False, "token"),
        ({"RAY_AUTH_TOKEN": "t"}, False, "token"),
        ({}, False, None),  # no token: nothing to send
        ({"RAY_AUTH_MODE": "disabled"}, True, "disabled"),  # a mode the user chose stands
    ],
)
def test_a_sweep_joining_by_address_sends_the_token_ray_start_would_use(tmp_path, environ, token_file, mode):
    from islab.sweep.ray_cluster import send_token_if_available

    if token_file:
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("t", encoding="utf-8")
    environ = dict(environ)
    send_token_if_available(environ, tmp_path)
    assert environ.get("RAY_AUTH_MODE") == mode
