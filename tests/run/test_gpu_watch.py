"""islab.run.gpu_watch: ranks on one GPU named with the fix, per-rank GPU memory and utilisation.

The launcher-side watch reads NVML; here NVML is ``tests/fixtures/fake_nvml/pynvml.py`` (the real
module's names and shapes over a folder of claims). The slow tests launch a real ``--script`` job of
2 ranks under torchrun, whose ranks "create their CUDA context" by claiming a fake GPU: on GPU 0 both
(a script that never sets its device), or on GPU ``LOCAL_RANK`` (the fix)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from child_env import child_env
from paths import FIXTURES

from islab.run.gpu_watch import SET_DEVICE_FIX, GpuWatch, RankGpu, ranks_on_gpus, sample, shared_gpu

FAKE_NVML = FIXTURES / "fake_nvml"


def test_a_gpu_holding_ranks_that_are_nowhere_else_is_shared() -> None:
    placed = ranks_on_gpus({0: [(10, 5), (11, 7), (99, 1)], 1: []}, {10: 0, 11: 1})
    assert placed == [RankGpu(0, 0, 5), RankGpu(1, 0, 7)]  # pid 99 is no rank of ours
    assert shared_gpu(placed) == (0, [0, 1])
    # each rank on its own GPU, rank 1 with a stray context on GPU 0 too: not the mistake
    assert shared_gpu(ranks_on_gpus({0: [(10, 5), (11, 1)], 1: [(11, 7)]}, {10: 0, 11: 1})) is None
    assert shared_gpu([RankGpu(0, 0, 5)]) is None


def test_the_real_module_shapes_are_read(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.setenv("FAKE_NVML_DIR", str(tmp_path))
    import pynvml

    pynvml.claim(1, 3 * 10**9)  # this process, on GPU 1
    pynvml.nvmlInit()
    gpus, processes = sample(pynvml)
    assert [(g.index, g.name, g.uuid) for g in gpus] == [(0, "Fake H200", "GPU-fake-0"), (1, "Fake H200", "GPU-fake-1")]
    assert processes == {0: [], 1: [(os.getpid(), 3 * 10**9)]} and gpus[1].utilization == 90


def test_two_samples_in_a_row_are_needed_and_the_message_names_ranks_gpu_and_fix() -> None:
    class Nvml:  # nvidia-ml-py's shapes, two ranks' pids on GPU 0
        pids = ((101, 10**9), (202, 10**9))

        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, index):
            return index

        def nvmlDeviceGetName(self, handle):
            return b"NVIDIA H200"  # bytes, as nvidia-ml-py before 11.515 returns

        def nvmlDeviceGetUUID(self, handle):
            return f"GPU-{handle}"

        def nvmlDeviceGetMemoryInfo(self, handle):
            return SimpleNamespace(total=10**11, free=10**11, used=0)

        def nvmlDeviceGetUtilizationRates(self, handle):
            return SimpleNamespace(gpu=50, memory=10)

        def nvmlDeviceGetComputeRunningProcesses(self, handle):
            return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.pids] if handle == 0 else []

    watch = GpuWatch(Nvml(), entrypoint=True, interval_s=0)
    watch.rank_pids = lambda live: {101: 0, 202: 1}  # type: ignore[method-assign]
    assert watch(set()) is False  # first sight: maybe a rank touching GPU 0 on its way to its own
    assert watch(set()) is True
    message = watch.message()
    assert "ranks 0 and 1 are all on GPU 0 (NVIDIA H200, GPU-0)" in message and SET_DEVICE_FIX in message
    assert watch.summary_text() == "rank 0: GPU 0 1.0 GB 50% · rank 1: GPU 0 1.0 GB 50%"


def launch_script(tmp_path: Path, gpu_of_rank: str, seconds: float) -> tuple[subprocess.CompletedProcess, float]:
    claims = tmp_path / "claims"
    claims.mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, time
        import pynvml  # the fake: claim() stands for creating a CUDA context on a device
        local_rank = int(os.environ["LOCAL_RANK"])
        pynvml.claim({gpu_of_rank}, (2 + local_rank) * 10**9)
        print("training on", {gpu_of_rank}, flush=True)
        time.sleep({seconds})
    """)
    )
    env = {**child_env(), "FAKE_NVML_DIR": str(claims),
           "PYTHONPATH": os.pathsep.join([str(FAKE_NVML), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    argv = [sys.executable, "-m", "islab.cli", "--device", "cpu", "--nproc", "2", "--script", str(script),
            "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False)
    return done, time.monotonic() - started


@pytest.mark.slow
def test_two_ranks_of_a_script_on_one_gpu_are_stopped_within_seconds_with_the_fix(tmp_path: Path) -> None:
    done, seconds = launch_script(tmp_path, "0", seconds=120)  # never set its device: both on GPU 0
    assert done.returncode == 1, done.stderr
    assert seconds < 60, seconds  # not the 120 s the ranks would sleep
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ranks 0 and 1 are all on GPU 0 (Fake H200, GPU-fake-0)"), done.stderr
    assert SET_DEVICE_FIX in last and "drop the entry point" in last


@pytest.mark.slow
def test_ranks_on_their_own_gpus_train_on_and_the_summary_shows_each_ranks_gpu(tmp_path: Path) -> None:
    done, _ = launch_script(tmp_path, "local_rank", seconds=4)
    assert done.returncode == 0, done.stderr
    assert "GPU per rank (peak): rank 0: GPU 0 2.0 GB 90% · rank 1: GPU 1 3.0 GB 90%" in done.stdout + done.stderr
