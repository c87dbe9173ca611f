"""The benchmark script cannot rot: run ``scripts/bench.py --quick`` (tiny sizes, one run, every
section, the real launcher with 1 and 2 CPU ranks) and check the report's shape. No timing
assertions: numbers on a CI machine mean nothing, only that every section produced them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_benchmark_runs_every_section(tmp_path: Path) -> None:
    out, raw = tmp_path / "bench.md", tmp_path / "bench.json"
    command = [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--out", str(out), "--json", str(raw)]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]

    report = json.loads(raw.read_text())
    assert {"meta", "env", "train", "tts", "cli"} <= set(report)
    env = report["env"]
    for variant in ("gymnasium", "eager"):
        assert all(rate and rate > 0 for rate in env["median"][variant].values()), variant
    assert env["blas"]  # which BLAS kernel numpy ran is recorded
    rsl_rl = report["train"]["libs"]["rsl_rl"]
    assert rsl_rl["returncodes"] == [0, 0, 0, 0]  # 1 rank, 2 ranks, 2 independent 1-rank jobs
    median = rsl_rl["median"]
    assert median["machine_ceiling"] > 0  # both independent jobs measured
    assert median["collective_calls_per_iteration"] > 0 and median["collective_call_s"] > 0
    assert report["train"]["gloo_latency"]["floats"]["1"]["median_s"] > 0
    assert median["steps_per_s_1rank"] > 0 and median["steps_per_s_nrank"] > 0
    assert 0 < median["env_share_1rank"] < 1  # the probe in the rank timed env.step
    assert 0 < median["sync_share"] < 1  # ... and the gloo collectives at 2 ranks
    assert set(report["tts"]["median_time_s"]) == set(report["tts"]["configs"])
    assert report["cli"]["median_s"]["dry_run"] > 0
    sync = report["sync"]["libs"]["rsl_rl"]  # stock vs fused side by side (issue 13)
    assert 0 < sync["fused"]["collectives_per_iteration"] <= sync["updates_per_iteration"] + 2
    assert sync["stock"]["collectives_per_iteration"] > sync["fused"]["collectives_per_iteration"]

    markdown = out.read_text()
    for heading in ("## 1.", "## 2-4.", "## 8.", "## 5.", "## 6.", "## 7. GPU", "## Commands"):
        assert heading in markdown
    assert "python scripts/bench.py --device cuda" in markdown


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
