"""``--isaaclab`` on Isaac Lab 3: the version-aware preset, planned from tests/fixtures/isaaclab3_tree
(an Isaac Lab 3.0 checkout's layout; the same tree on PYTHONPATH is what ``--isaaclab auto`` finds in
a checkout installed in editable mode). The real Isaac Lab 3.0, its launcher and its trainer are
tested in tests/isaaclab3 (CI's isaaclab job); 2.x plans are the golden dry runs and
tests/resolve/test_isaaclab_preset.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from cli_results import dry_run_json as _plan
from cli_results import one_error as _error
from paths import FIXTURES

from islab.resolve.isaaclab3 import with_run_timestamp
from islab.resolve.isaaclab_install import PresetProblem, from_probe
from islab.resolve.isaaclab_renames import renamed_task

TREE3 = FIXTURES / "isaaclab3_tree"
ENTRY = TREE3 / "source" / "isaaclab_rl" / "isaaclab_rl" / "entrypoints" / "multigpu.py"
EDITABLE = [str(TREE3 / "source" / name) for name in ("isaaclab", "isaaclab_rl", "isaaclab_tasks")]
STAMP = re.compile(r"--run_timestamp=(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})")

pytestmark = pytest.mark.usefixtures("clean_environment")


def _rank_argv(plan):
    """The per-rank part of node 0's command: from the trainer's file on."""
    argv = plan["nodes"][0]["argv"]
    return argv[argv.index(str(ENTRY.resolve())) :]


@pytest.fixture
def editable(monkeypatch):
    """Isaac Lab 3 'installed' in this interpreter the way ./isaaclab.sh -i installs a checkout."""
    monkeypatch.setenv("PYTHONPATH", ":".join(EDITABLE))


@pytest.mark.parametrize("how", ["dir", "auto", "auto-env"])
def test_isaac_lab_3_runs_what_train_multigpu_runs_per_rank(islab, editable, monkeypatch, how):
    where = {"dir": ("--isaaclab", str(TREE3)), "auto": ("--isaaclab", "auto"), "auto-env": ()}[how]
    if how == "auto-env":
        monkeypatch.setenv("ISLAB_ISAACLAB", "auto")
    plan = _plan(islab, *where, "--task", "Isaac-Cartpole", "--gpus", "2", "--num-envs", "64", "--seed", "3")
    rank = _rank_argv(plan)
    stamp = STAMP.fullmatch(rank[-2])
    assert stamp is not None, rank
    assert rank == [str(ENTRY.resolve()), "--rl_library", "rsl_rl", "--task", "Isaac-Cartpole", "--num_envs", "64",
                    "--seed", "3", stamp.group(0), "--distributed"]  # fmt: skip
    assert "--headless" not in plan["nodes"][0]["argv"]
    # one run folder for all ranks, named like islab's run directory for the same launch
    assert plan["nodes"][0]["env"]["ISLAB_RUN_DIR"].endswith(f"/Isaac-Cartpole/{stamp.group(1)}")


def test_overrides_presets_physics_and_viz_pass_through_and_a_users_timestamp_is_kept(islab, editable):
    rank = _rank_argv(_plan(islab, "--isaaclab", "auto", "--task", "Isaac-Cartpole", "--gpus", "2",
                            "presets=newton", "physics=newton_mjwarp", "agent.algorithm.learning_rate=0.001",
                            "--", "--viz", "kit", "--run_timestamp", "shared-by-both-nodes"))  # fmt: skip
    assert rank[5:] == ["presets=newton", "physics=newton_mjwarp", "agent.algorithm.learning_rate=0.001",
                        "--viz", "kit", "--run_timestamp", "shared-by-both-nodes", "--distributed"]  # fmt: skip
    assert not any(STAMP.match(arg) for arg in rank)


def test_skrl_jax_runs_under_skrls_launcher_with_the_same_entry(islab, editable):
    plan = _plan(islab, "--isaaclab", "auto", "--task", "Isaac-Cartpole", "--gpus", "2", "--lib", "skrl",
                 "--ml-framework", "jax")  # fmt: skip
    assert plan["launcher"] == "skrl-jax"
    argv = plan["nodes"][0]["argv"]
    assert argv[1:3] == ["-m", "skrl.utils.distributed.jax"]
    assert _rank_argv(plan)[1:7] == ["--rl_library", "skrl", "--task", "Isaac-Cartpole", "--ml_framework", "jax"]


@pytest.mark.parametrize(("lib", "device_overrides"), [
    ("rsl_rl", ["agent.device=cpu"]),
    ("rl_games", ["agent.params.config.device=cpu", "agent.params.config.device_name=cpu"]),
    ("skrl", []),
])  # fmt: skip
def test_one_cpu_rank_trains_on_the_cpu_without_distributed(islab, editable, lib, device_overrides):
    rank = _rank_argv(_plan(islab, "--isaaclab", "auto", "--task", "Isaac-Cartpole", "--device", "cpu", "--lib", lib))
    assert rank[5:-1] == ["--device", "cpu", *device_overrides] and "--distributed" not in rank
    mine = _rank_argv(_plan(islab, "--isaaclab", "auto", "--task", "Isaac-Cartpole", "--device", "cpu", "--lib", lib,
                            *[item.replace("=cpu", "=cuda:1") for item in device_overrides]))  # fmt: skip
    assert not any(item in mine for item in device_overrides)  # the user's keys win (not given twice)
    err = _error(islab("--isaaclab", "auto", "--task", "Isaac-Cartpole", "--device", "cpu", "--nproc", "2",
                       "--dry-run"), "--device")  # fmt: skip
    assert "cuda:<local rank>" in err and "--gpus N" in err


def test_task_ids_are_checked_against_isaac_lab_3_with_its_renames(islab, editable):
    err = _error(islab("--isaaclab", "auto", "--task", "Isaac-Cartpole-v0", "--gpus", "2", "--dry-run"), "--task")
    assert "Did you mean Isaac-Cartpole?" in err and "renamed" in err and "3.0.0" in err
    err = _error(islab("--isaaclab", str(TREE3), "--task", "Isaac-Cartpole-Showcase-Direct-v0", "--gpus", "1",
                       "--dry-run"), "--task")  # fmt: skip
    assert "Did you mean IsaacContrib-Cartpole-Showcase-Direct?" in err
    err = _error(islab("--isaaclab", "auto", "--task", "Isaac-Cartpol", "--gpus", "1", "--dry-run"), "--task")
    assert "Did you mean Isaac-Cartpole?" in err and "renamed" not in err
    # module:Task -- Isaac Lab imports the module, which registers the id: not checked here
    assert _plan(islab, "--isaaclab", "auto", "--task", "acme.tasks:Acme-Reach", "--gpus", "1")


def test_renames_follow_the_changelog_and_its_rules():
    known = ["Isaac-Cartpole", "IsaacContrib-Velocity-Rough-AnymalC", "Isaac-Velocity-Flat-UnitreeGo2",
             "Isaac-Reach-Franka"]  # fmt: skip
    assert renamed_task("Isaac-Cartpole-v0", known) == "Isaac-Cartpole"
    assert renamed_task("Isaac-Velocity-Rough-Anymal-C-v0", known) == "IsaacContrib-Velocity-Rough-AnymalC"  # 2 pairs
    assert renamed_task("Isaac-Velocity-Flat-Unitree-Go2-Play-v0", known) == "Isaac-Velocity-Flat-UnitreeGo2"  # rules
    assert renamed_task("Isaac-Reach-Franka-Play-v0", known) == "Isaac-Reach-Franka"
    assert renamed_task("Isaac-Quadcopter-Direct-v0", known) is None


def test_run_timestamp_goes_where_isaac_labs_launcher_puts_it():
    assert with_run_timestamp(("--task", "T", "--distributed"), "S") == ("--task", "T", "--run_timestamp=S",
                                                                          "--distributed")  # fmt: skip
    assert with_run_timestamp(("--task", "T", "--device", "cpu"), "S") == ("--task", "T", "--device", "cpu",
                                                                            "--run_timestamp=S")  # fmt: skip
    assert with_run_timestamp(("--run_timestamp=X", "--distributed"), "S") == ("--run_timestamp=X", "--distributed")


def test_auto_names_what_the_interpreter_lacks(islab, tmp_path, monkeypatch):
    err = _error(islab("--isaaclab", "auto", "--task", "Isaac-Cartpole", "--gpus", "2", "--dry-run"), "--isaaclab")
    assert "no isaaclab package in" in err and "--python" in err and "pip install isaaclab==3.0.0" in err
    # an Isaac Lab 2.x pip install: isaaclab without isaaclab_rl/entrypoints/multigpu.py
    (tmp_path / "isaaclab").mkdir()
    (tmp_path / "isaaclab-2.3.0.dist-info").mkdir()
    metadata = "Metadata-Version: 2.1\nName: isaaclab\nVersion: 2.3.0\n"
    (tmp_path / "isaaclab-2.3.0.dist-info" / "METADATA").write_text(metadata)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    err = _error(islab("--isaaclab", "auto", "--task", "Isaac-Cartpole-v0", "--gpus", "2", "--dry-run"), "--isaaclab")
    assert "isaaclab 2.3.0" in err and "--isaaclab DIR" in err
    # a real launch needs the interpreter; a plan for another machine (dry run, sbatch, k8s) says so
    elsewhere = str(tmp_path / "nope")
    err = _error(islab("--isaaclab", "auto", "--python", elsewhere, "--task", "T", "--gpus", "1"), "--isaaclab")
    assert "could not run" in err
    code, out, err = islab("--isaaclab", "auto", "--python", elsewhere, "--task", "T", "--gpus", "1", "--dry-run",
                           "--json")  # fmt: skip
    argv = json.loads(out)["nodes"][0]["argv"]
    assert code == 0 and f"<site-packages of {elsewhere}>/isaaclab_rl/entrypoints/multigpu.py" in argv
    assert err.startswith(f"warning: --isaaclab auto: {elsewhere} is not on this machine"), err
    code, out, err = islab("k8s", "--isaaclab", "auto", "--python", elsewhere, "--task", "T", "--gpus", "1",
                           "--image", "nvcr.io/nvidia/isaac-lab:3.0.0")  # fmt: skip
    assert code == 0 and "--isaaclab" in out and "is not on this machine" in err


def test_the_probe_reports_an_installs_version_and_external_task_packages(tmp_path):
    site = tmp_path / "site"
    (site / "isaaclab_rl" / "entrypoints").mkdir(parents=True)
    (site / "isaaclab_rl" / "entrypoints" / "multigpu.py").write_text("")
    packages = {name: [str(site / name)] for name in ("isaaclab", "isaaclab_rl", "isaaclab_tasks")}
    report = {"version": "3.0.0", "packages": packages, "external": [str(tmp_path / "acme")]}
    install = from_probe(report, "/venv/bin/python")
    assert install.version == "3.0.0" and install.where == "isaaclab 3.0.0 in /venv/bin/python"
    assert install.task_dirs == (site / "isaaclab_tasks", tmp_path / "acme")
    with pytest.raises(PresetProblem, match="not Isaac Lab 3's per-rank trainer"):
        from_probe({**report, "packages": {**report["packages"], "isaaclab_rl": []}}, "/venv/bin/python")


def test_a_cluster_file_and_a_sweep_take_isaaclab_auto(islab, editable, tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("isaaclab: auto\ntask: Isaac-Cartpole\nnproc_per_node: 2\ndevice: cuda\n")
    assert _rank_argv(_plan(islab, "--cluster", str(cluster)))[:5] == [str(ENTRY.resolve()), "--rl_library", "rsl_rl",
                                                                      "--task", "Isaac-Cartpole"]  # fmt: skip
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\nrun: {isaaclab: auto, task: Isaac-Cartpole, device: cpu, nproc_per_node: 1}\nseeds: 2\n"
                     "metric: {name: mean_return, mode: max}\n")  # fmt: skip
    code, out, err = islab("sweep", str(sweep), "--dry-run", "--json")
    assert code == 0, err
    assert all("--isaaclab" in json.dumps(trial) for trial in json.loads(out)["trials"]), out


def test_the_launcher_never_imports_isaac_lab(islab, editable):
    _plan(islab, "--isaaclab", "auto", "--task", "Isaac-Cartpole", "--gpus", "2")
    assert not any(name.split(".")[0] in ("isaaclab", "isaaclab_rl", "isaaclab_tasks") for name in sys.modules)
    assert Path(ENTRY).is_file()
