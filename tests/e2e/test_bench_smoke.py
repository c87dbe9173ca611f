"""The benchmark script cannot rot: run ``scripts/bench.py --quick`` (tiny sizes, one run, every
section, the real launcher with 1 and 2 CPU ranks, Cartpole and Quadcopter) and check the report's
shape. No timing assertions: numbers on a CI machine mean nothing, only that every section produced them."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from paths import REPO

ROOT = REPO
TASKS = ("Islab-Cartpole-v0", "Islab-Quadcopter-v0")


def load_bench() -> ModuleType:
    """scripts/bench.py as a module (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("islab_bench_script", ROOT / "scripts" / "bench.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


def run_bench(tmp_path: Path, *args: str) -> tuple[dict, str]:
    out, raw = tmp_path / "bench.md", tmp_path / "bench.json"
    command = [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--out", str(out), "--json", str(raw)]
    completed = subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(raw.read_text()), out.read_text()


def table_after(markdown: str, heading: str) -> str:
    return markdown.split(heading, 1)[1].split("\n\n")[1]


@pytest.mark.slow
def test_quick_benchmark_runs_every_section(tmp_path: Path) -> None:
    """Every section once; the task-dependent sections (1-4) on the Quadcopter, so the task
    dimension is exercised at no extra cost (time to solve and stock-vs-fused stay on Cartpole)."""
    task = TASKS[1]
    report, markdown = run_bench(tmp_path, "--tasks", task)
    assert {"meta", "env", "train", "tts", "cli", "launch"} <= set(report)
    assert report["meta"]["tasks"] == [task]
    env = report["env"]["tasks"]
    assert list(env) == [task]
    assert env[task]["variants"] == ["eager"]  # no gymnasium twin, no compiled step
    assert all(rate and rate > 0 for rate in env[task]["median"]["eager"].values())
    train = report["train"]["tasks"]
    assert list(train) == [task]
    rsl_rl = train[task]["libs"]["rsl_rl"]
    assert rsl_rl["returncodes"] == [0, 0, 0, 0]  # 1 rank, 2 ranks, 2 independent 1-rank jobs
    median = rsl_rl["median"]
    assert median["machine_ceiling"] > 0  # both independent jobs measured
    assert median["scaling_paired"] > 0
    assert median["collective_calls_per_iteration"] > 0 and median["collective_call_s"] > 0
    assert report["train"]["gloo_latency"]["floats"]["1"]["median_s"] > 0
    assert median["steps_per_s_1rank"] > 0 and median["steps_per_s_nrank"] > 0
    assert 0 < median["env_share_1rank"] < 1  # the probe in the rank timed env.step
    assert 0 < median["sync_share"] < 1  # ... and the gloo collectives at 2 ranks
    assert set(report["tts"]["median_time_s"]) == set(report["tts"]["configs"])
    assert report["cli"]["median_s"]["dry_run"] > 0
    assert all(report["cli"]["median_s"][name] > 0 for name in ("help", "tasks", "doctor"))
    launch = report["launch"]  # islab-train against the bare torchrun command it plans (issue 28)
    for way in ("islab_train", "bare_torchrun"):
        assert 0 < launch["median_s"][way]["first_s"] <= launch["median_s"][way]["return_s"], launch
    assert launch["minus_bare_s"]["islab_train"]["return_s"] is not None
    sync = report["sync"]["libs"]["rsl_rl"]  # stock vs fused side by side (issue 13)
    assert 0 < sync["fused"]["collectives_per_iteration"] <= sync["updates_per_iteration"] + 2
    assert sync["stock"]["collectives_per_iteration"] > sync["fused"]["collectives_per_iteration"]

    for heading in ("## 1.", "## 2-4.", "## 8.", "## 5.", "## 6.", "## 6b.", "## 7. GPU", "## Commands"):
        assert heading in markdown
    assert "python scripts/bench.py --device cuda" in markdown
    env_table, train_table = (table_after(markdown, heading) for heading in ("## 1.", "## 2-4."))
    assert env_table.startswith("| task | num_envs |") and train_table.startswith("| task | library |")
    assert [line.split(" | ")[1] for line in env_table.splitlines() if line.startswith(f"| {task} |")] == ["64", "256"]
    assert [line.split(" | ")[1] for line in train_table.splitlines() if line.startswith(f"| {task} |")] == ["rsl_rl"]


@pytest.mark.slow
def test_quick_env_section_compares_tasks_and_gymnasium(tmp_path: Path) -> None:
    report, markdown = run_bench(tmp_path, "--sections", "env", "--tasks", ",".join(TASKS))
    env = report["env"]["tasks"]
    assert list(env) == list(TASKS)
    for variant in ("gymnasium", "eager"):
        assert all(rate and rate > 0 for rate in env[TASKS[0]]["median"][variant].values()), variant
    assert env[TASKS[0]]["blas"]  # which BLAS kernel numpy ran is recorded
    assert env[TASKS[1]]["variants"] == ["eager"]
    env_table = table_after(markdown, "## 1.")
    for task in TASKS:  # a row per (task, size)
        assert [line.split(" | ")[1] for line in env_table.splitlines() if line.startswith(f"| {task} |")] == [
            "64",
            "256",
        ]


def test_tasks_option_takes_comma_or_space_separated_ids_and_rejects_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench()
    assert bench.resolve_tasks(["Islab-Cartpole-v0,Islab-Quadcopter-v0", "Islab-Cartpole-v0"]) == (list(TASKS), {})
    assert bench.main(["--quick", "--tasks", "Islab-Cartpole-v0,Nope"]) == 2  # before anything runs
    error = capsys.readouterr().err
    assert error.startswith("error: tasks: unknown task 'Nope'. Use one of: ") and "Islab-Quadcopter-v0" in error


@pytest.mark.skipif(
    importlib.util.find_spec("mjlab") is not None, reason="checks the note shown where mjlab is not installed"
)
def test_an_mjlab_task_without_mjlab_is_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()
    out = tmp_path / "bench.md"  # the env section with only an mjlab task: nothing runs, the report says why
    assert bench.main(["--quick", "--sections", "env", "--tasks", "Mjlab-Cartpole-Balance", "--out", str(out)]) == 0
    why = 'needs the [mjlab] extra (mjlab is not importable): pip install -e ".[mjlab]"'
    assert f"[bench] skip task Mjlab-Cartpole-Balance: {why}" in capsys.readouterr().err
    report = out.read_text()
    assert f"- skipped task Mjlab-Cartpole-Balance: {why}" in report and "- tasks (sections 1-4): none" in report


def test_probe_recognizes_only_worker_ranks() -> None:
    import importlib.util

    # loaded from its file (not imported as "sitecustomize"); ISLAB_BENCH_TIMINGS is unset, so inert
    spec = importlib.util.spec_from_file_location("bench_sitecustomize", ROOT / "scripts/bench_hooks/sitecustomize.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    is_worker = module._is_worker_rank
    assert is_worker(["python", "-m", "islab.worker", "--lib", "rsl_rl"])
    assert is_worker(["python", "-u", "-m", "islab.worker"])
    assert is_worker(["python", "/x/site-packages/islab/worker/__main__.py", "--lib", "skrl"])
    assert not is_worker(["python", "-m", "torch.distributed.run", "-m", "islab.worker"])
    assert not is_worker(["python", "-m", "skrl.utils.distributed.jax", "/x/islab/worker/__main__.py"])
    assert not is_worker(["/venv/bin/islab-train", "--dry-run"])


def test_probe_timings_wait_for_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA kernel or NCCL call returns when queued: a timed call synchronizes before and after it,
    or NCCL time reads ~0 and the env share is inflated. (CPU-checkable: the synchronize is recorded.)"""
    import torch

    sys.path.insert(0, str(ROOT / "scripts" / "bench_hooks"))
    import _islab_bench_probe as probe

    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: events.append("synchronize"))
    monkeypatch.setitem(probe.RECORDS, "collective", [])
    timed = probe._timed(lambda: events.append("all_reduce"), "collective", "all_reduce")
    timed()
    assert events == ["synchronize", "all_reduce", "synchronize"]
    assert [name for _, _, name in probe.RECORDS["collective"]] == ["all_reduce"]


def test_probe_times_the_step_of_any_env_the_worker_builds(tmp_path: Path) -> None:
    """The env share counts every task's step, also an env that is not our DirectRLEnv (the mjlab
    bridge): the probe wraps the instance ``islab.envs.make_env`` returns. Run in a child process
    (installing the probe patches torch.distributed and islab for good)."""
    child = f"""
import sys
sys.path.insert(0, {str(ROOT / "scripts" / "bench_hooks")!r})
import islab.envs

class BridgeEnv:  # not a DirectRLEnv, like MjlabEnv
    def step(self, action):
        return action

islab.envs.make_env = lambda *args, **kwargs: BridgeEnv()
import _islab_bench_probe
_islab_bench_probe.install({str(tmp_path)!r})
from islab.envs import make_env  # as the worker does, after the probe is installed
env = make_env("Mjlab-Velocity-Flat-Unitree-Go1", 4, "cpu", seed=0)
assert env.step(3) == 3 and env.step(4) == 4
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RANK": "0"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = json.loads((tmp_path / "rank_0.json").read_text())
    assert [name for _, _, name in records["env_step"]] == ["env.step", "env.step"]
