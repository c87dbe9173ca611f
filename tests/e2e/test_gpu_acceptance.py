"""scripts/gpu_acceptance.py: its argument handling, its plan and its report, on a machine without GPUs.

The GPU run itself needs a GPU machine; here the same steps run on CPU ranks (``--device cpu``),
which exercises every command it builds and the report it writes from their real output."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from paths import REPO

SCRIPT = REPO / "scripts" / "gpu_acceptance.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


acceptance = _load()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--libs", "rsl_rl", "sb3"], "--libs: unknown sb3"),
        (["--iterations", "0"], "--iterations must be at least 1"),
        (["--gpus", "0"], "--gpus must be at least 1"),
        (["--device", "tpu"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        acceptance.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_cuda_without_a_gpu_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "report.md"
    assert acceptance.main(["--out", str(out), "--work-dir", str(tmp_path / "work")]) == 2
    assert "CUDA exposes no GPU" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "work").exists()


def _plan(*argv: str, gpus: int = 4, collectives: bool = False):
    return acceptance.plan_steps(acceptance.parse_args(list(argv)), gpus, collectives)


def test_every_library_path_runs_on_one_gpu_and_on_all():
    training = [step for step in _plan() if step.section == "training"]
    assert [step.name for step in training] == [
        f"{lib} on {ranks} rank(s)" for lib in acceptance.LIBRARY_PATHS for ranks in (1, 4)
    ]
    jax_all = training[-1].argv
    assert jax_all[jax_all.index("--ml-framework") + 1] == "jax"
    assert jax_all[jax_all.index("--gpus") + 1] == "4"
    assert "--device" not in jax_all  # --gpus sets cuda itself


def test_the_plan_plays_a_gpu_checkpoint_on_the_gpu_and_on_cpu_exports_it_and_benches():
    steps = _plan()
    names = [(step.section, step.name) for step in steps]
    assert ("policy", "play on cuda") in names and ("policy", "play on cpu") in names
    assert ("policy", "export") in names
    assert ("facts", "nvidia-smi -L") in names
    fit = next(step for step in steps if step.section == "fit")  # islab-train fit's GPU path, on one GPU
    assert fit.argv[fit.argv.index("fit") + 1 :][:2] == ["--lib", "rsl_rl"] and "--json" in fit.argv
    assert fit.argv[fit.argv.index("--gpus") + 1] == "1"
    bench = next(step for step in steps if step.section == "bench")
    assert bench.argv[bench.argv.index("--device") + 1] == "cuda"
    assert bench.argv[bench.argv.index("--sections") + 1 : bench.argv.index("--sections") + 3] == ["env", "train"]
    assert not any(step.section == "bench" for step in _plan("--skip-bench"))


def test_scale_runs_at_every_gpu_and_two_gpus_check_the_placement_watch():
    steps = _plan()
    (scale,) = [step for step in steps if step.section == "scale"]
    assert scale.argv[scale.argv.index("--gpus") + 1] == "4" and "--json" in scale.argv
    shared, fixed = [step for step in steps if step.section == "placement"]
    assert shared.expect_status == 1 and shared.reads_stderr and "--set-device" not in shared.argv
    assert fixed.expect_status == 0 and fixed.argv[-2:] == ["--", "--set-device"]
    assert not any(step.section == "placement" for step in _plan(gpus=1))  # one GPU: nothing to misplace
    # a refusal passes only with the exit status and the line it expects
    named = acceptance.Result(shared, 1, 3.0, shared.figures("error: ranks 0 and 1 are all on GPU 0 (...)"), [])
    assert named.passed and not acceptance.Result(shared, 0, 3.0, {}, []).passed
    assert "problem" in shared.figures("error: something else")


def test_pre_flight_runs_only_when_this_islab_train_has_it():
    assert not any(step.section == "pre-flight" for step in _plan())
    (preflight,) = [step for step in _plan(collectives=True) if step.section == "pre-flight"]
    assert preflight.argv[-4:] == ["--collectives", "--gpus", "4", "--json"]


def test_one_gpu_machine_runs_each_path_once():
    training = [step for step in _plan(gpus=1) if step.section == "training"]
    assert len(training) == len(acceptance.LIBRARY_PATHS)


def _result(section: str, status: int | None, figures: dict | None = None):
    step = acceptance.Step(section, f"{section} step", ["islab-train", section, "--x", "a|b"])
    return acceptance.Result(step, status, 1.25, figures or {}, [f"{section} said something", "last line"])


def test_the_report_names_every_step_its_command_and_the_failures(tmp_path):
    args = acceptance.parse_args(["--work-dir", str(tmp_path)])
    results = [
        _result("doctor", 0, {"ok": True}),
        _result("training", 1),
        _result("policy", None),
        _result("host syncs", 0, {"problem": "no JSON object in the output"}),
    ]
    report = acceptance.render_report(results, args, "2026-11-25 15:00:00")
    assert "verdict: **FAIL (3 of 4 steps)**" in report
    assert "| doctor | doctor step | pass | 1.2 | ok=True | `islab-train doctor --x 'a\\|b'` |" in report
    assert "| training | training step | FAIL (1) |" in report
    assert "| policy | policy step | timeout |" in report
    assert "## training: training step failed" in report and "training said something" in report
    assert "## doctor" not in report
    assert "verdict: **PASS**" in acceptance.render_report(results[:1], args, "now")


@pytest.mark.slow
def test_a_cpu_run_of_the_whole_check_writes_a_passing_report(tmp_path):
    """The real commands on CPU ranks: training, play, export, host syncs, doctor; report figures."""
    out = tmp_path / "report.md"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--libs", "rsl_rl", "--iterations", "2",
         "--num-envs", "16", "--nproc", "2", "--skip-bench", "--out", str(out), "--work-dir", str(tmp_path / "w")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False,
    )  # fmt: skip
    report = out.read_text()
    assert done.returncode == 0, report + done.stdout + done.stderr
    assert "verdict: **PASS**" in report
    for row in ("| training | rsl_rl on 1 rank(s) | pass", "| training | rsl_rl on 2 rank(s) | pass",
                "| policy | play on cpu | pass", "| policy | export | pass", "| host syncs | per iteration | pass",
                "| doctor | doctor | pass"):  # fmt: skip
        assert row in report
    assert "world_size=2" in report and "env_steps_per_s=" in report
