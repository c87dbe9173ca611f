"""The launcher's count of the CUDA devices a rank will see (islab.doctor.probes.visible_gpu_count),
from fakes of what it asks: NVML (nvidia-ml-py's pynvml module), a torch child process, nvidia-smi.

What must hold: a MIG GPU gives a process one CUDA device however many instances it has (and none
without one); CUDA_VISIBLE_DEVICES selects by index or UUID and stops at the first entry naming
nothing; NVML missing -> the torch probe's count; torch missing too -> nvidia-smi -L; nvidia-smi
missing -> 0; no NVIDIA device node -> CUDA_VISIBLE_DEVICES's entries (else 0) without asking anything."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from islab.doctor import probes
from islab.doctor.probes import PhysicalGpu, cuda_device_count, read_nvml, visible_gpu_count


class NVMLError(Exception):
    pass


def fake_nvml(gpus: list[tuple[str, list[str] | None]]) -> Any:
    """A pynvml stand-in for ``gpus``: (UUID, MIG instance UUIDs or None for MIG mode off) each;
    MIG slots beyond the instances raise NVMLError as empty slots do."""
    calls: list[str] = []

    def mig_mode(handle: int) -> tuple[int, int]:
        if gpus[handle][1] is None and handle % 2:  # odd GPUs: not MIG-capable at all
            raise NVMLError("not supported")
        return (1, 1) if gpus[handle][1] is not None else (0, 0)

    def mig_handle(handle: int, slot: int) -> tuple[int, int]:
        if slot >= len(gpus[handle][1] or []):
            raise NVMLError("not found")
        return (handle, slot)

    def uuid(handle: Any) -> bytes:
        if isinstance(handle, tuple):
            return gpus[handle[0]][1][handle[1]].encode()
        return gpus[handle][0].encode()

    return SimpleNamespace(
        NVMLError=NVMLError,
        NVML_DEVICE_MIG_ENABLE=1,
        calls=calls,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetMaxMigDeviceCount=lambda handle: 7,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetUUID=uuid,
    )


TWO_PLAIN = [("GPU-aaaa", None), ("GPU-bbbb", None)]
MIG_TWO_INSTANCES = [("GPU-mmmm", ["MIG-1111", "MIG-2222"])]


def test_nvml_reads_gpus_and_mig_instances() -> None:
    nvml = fake_nvml([*TWO_PLAIN, *MIG_TWO_INSTANCES, ("GPU-eeee", [])])
    assert read_nvml(nvml) == [
        PhysicalGpu("GPU-aaaa"), PhysicalGpu("GPU-bbbb"), PhysicalGpu("GPU-mmmm", ("MIG-1111", "MIG-2222")),
        PhysicalGpu("GPU-eeee", ()),
    ]  # fmt: skip
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_that_does_not_start_is_no_answer() -> None:
    def failing_init() -> None:
        raise NVMLError("driver not loaded")

    assert read_nvml(SimpleNamespace(**{**vars(fake_nvml(TWO_PLAIN)), "nvmlInit": failing_init})) is None


@pytest.mark.parametrize(
    ("gpus", "visible", "expected"),
    [
        (TWO_PLAIN, None, 2),
        (MIG_TWO_INSTANCES, None, 1),  # nvidia-smi -L lists 2 MIG devices; a CUDA process sees one
        ([("GPU-mmmm", [])], None, 0),  # MIG mode on, no instance: nothing to run on
        ([*TWO_PLAIN, *MIG_TWO_INSTANCES], None, 3),
        (TWO_PLAIN, "1", 1),
        (TWO_PLAIN, "0,1,2", 2),  # index 2 names no GPU: CUDA stops there
        (TWO_PLAIN, "0,7,1", 1),
        (TWO_PLAIN, "1,1", 1),  # a GPU named twice: CUDA stops at the repeat
        (TWO_PLAIN, "GPU-bbbb,GPU-aa", 2),  # UUIDs and their prefixes
        (TWO_PLAIN, "GPU-zzzz", 0),
        (MIG_TWO_INSTANCES, "MIG-1111,MIG-2222", 1),  # one MIG instance per process
        (MIG_TWO_INSTANCES, "0", 1),  # the MIG GPU's index: its first instance
        ([*TWO_PLAIN, *MIG_TWO_INSTANCES], "MIG-2222,0", 2),
    ],
)
def test_cuda_device_count(gpus, visible, expected) -> None:
    assert cuda_device_count(read_nvml(fake_nvml(gpus)), visible) == expected


class FakeRun:
    """subprocess.run's stand-in: one answer per program (``python`` for the torch probe)."""

    def __init__(self, **answers: tuple[str, int] | None) -> None:
        self.answers, self.asked = answers, []

    def __call__(self, argv: list[str], **kwargs: object) -> Any:
        name = "nvidia_smi" if argv[0].endswith("nvidia-smi") else "python"
        self.asked.append(name)
        answer = self.answers.get(name)
        if answer is None:
            raise FileNotFoundError(argv[0])
        return SimpleNamespace(stdout=answer[0], returncode=answer[1])


SMI_MIG = (
    "GPU 0: NVIDIA A100 (UUID: GPU-aaaa)\n"
    "GPU 1: NVIDIA A100 (UUID: GPU-bbbb)\n"
    "  MIG 3g.40gb     Device  0: (UUID: MIG-1111)\n"
    "  MIG 3g.40gb     Device  1: (UUID: MIG-2222)\n"
)


def count(environ: dict[str, str], run: FakeRun, *, nvml=lambda: None, smi: str | None = "/usr/bin/nvidia-smi",
          device_node: bool = True) -> int:  # fmt: skip
    return visible_gpu_count(environ, lambda _: smi, run, nvml=nvml, python="/venv/bin/python",
                             exists=lambda _: device_node)  # fmt: skip


def test_nvml_decides_when_installed() -> None:
    run = FakeRun(python=("8\n", 0), nvidia_smi=(SMI_MIG, 0))
    gpus = read_nvml(fake_nvml([*TWO_PLAIN, *MIG_TWO_INSTANCES]))
    assert count({}, run, nvml=lambda: gpus) == 3
    assert count({"CUDA_VISIBLE_DEVICES": "MIG-2222"}, run, nvml=lambda: gpus) == 1
    assert run.asked == []  # neither torch nor nvidia-smi was needed


def test_without_nvml_a_torch_child_process_counts_in_the_ranks_environment() -> None:
    seen = {}

    def run(argv: list[str], **kwargs: Any) -> Any:
        seen.update(argv=argv, env=kwargs["env"])
        return SimpleNamespace(stdout="some import noise\n1\n", returncode=0)

    assert count({"CUDA_VISIBLE_DEVICES": "0", "X": "y"}, run) == 1
    assert seen["argv"] == ["/venv/bin/python", "-c", probes.CUDA_COUNT_PROBE]
    assert seen["env"] == {"CUDA_VISIBLE_DEVICES": "0", "X": "y"}


def test_without_nvml_or_torch_nvidia_smi_counts_mig_as_one_device() -> None:
    run = FakeRun(python=("ModuleNotFoundError: No module named 'torch'", 1), nvidia_smi=(SMI_MIG, 0))
    assert count({}, run) == 2  # GPU 0, and GPU 1's MIG instances as one device (not 3 or 4)
    assert run.asked == ["python", "nvidia_smi"]


def test_missing_nvidia_smi_or_a_failing_one_is_zero() -> None:
    assert count({}, FakeRun(), smi=None) == 0
    assert count({}, FakeRun(nvidia_smi=("", 9))) == 0
    assert count({}, FakeRun(python=("", 1))) == 0  # nvidia-smi -L raises FileNotFoundError


@pytest.mark.parametrize("visible", ["", "-1", " -1,0"])
def test_hidden_gpus_or_no_device_node_is_zero_without_asking(visible) -> None:
    run = FakeRun(python=("4\n", 0), nvidia_smi=(SMI_MIG, 0))
    assert count({"CUDA_VISIBLE_DEVICES": visible}, run, nvml=lambda: [PhysicalGpu("GPU-a")]) == 0
    assert count({}, run, nvml=lambda: [PhysicalGpu("GPU-a")], device_node=False) == 0
    assert run.asked == []


@pytest.mark.parametrize(("visible", "expected"), [("0,1,2", 3), ("0,-1,2", 1), ("GPU-aaaa,GPU-bbbb", 2)])
def test_without_a_device_node_cuda_visible_devices_is_taken_at_its_word(visible, expected) -> None:
    """Planning on a machine without GPUs for one that has them: nothing to ask, the entries count."""
    run = FakeRun(python=("0\n", 0), nvidia_smi=(SMI_MIG, 0))
    assert count({"CUDA_VISIBLE_DEVICES": visible}, run, nvml=lambda: [], device_node=False) == expected
    assert run.asked == []
