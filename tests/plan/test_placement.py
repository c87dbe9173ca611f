"""Placement risks named before launch (islab.plan.placement): CUDA_VISIBLE_DEVICES naming a GPU
twice is refused (exit 2, nothing started), cameras of an Isaac Lab entry point on more than one GPU
per node are warned about. No GPU here: GPU counts are passed in, as the launcher's probe would."""

from __future__ import annotations

import pytest
from paths import FIXTURES

from islab.plan.launch_issues import launch_issues
from islab.plan.placement import camera_warning, cuda_visible_devices_issue, repeated_device
from islab.spec.run_spec import RunSpec

TREE = FIXTURES / "isaaclab_tree"
GPU2 = RunSpec(device="cuda", nproc_per_node=2)


def test_a_repeated_entry_is_found_among_those_cuda_reads():
    assert repeated_device("0,0") == "0"
    assert repeated_device("1, 2,1") == "1"
    assert repeated_device("0,00") == "00"  # the same ordinal (CUDA and torch read the number)
    assert repeated_device("GPU-8932f937,GPU-8932f937") == "GPU-8932f937"
    assert repeated_device("0,1,2,3") is None and repeated_device("") is None
    assert repeated_device("0,-1,0") is None  # CUDA stops at the first invalid entry: the second 0 is never read


def test_cuda_visible_devices_naming_a_gpu_twice_is_refused_with_the_fix():
    issue = cuda_visible_devices_issue(GPU2, {"CUDA_VISIBLE_DEVICES": "0,0"})
    assert issue is not None and issue.field == "CUDA_VISIBLE_DEVICES"
    assert "CUDA_VISIBLE_DEVICES=0,0 (from this shell) names GPU 0 twice" in issue.problem
    assert "CUDA_VISIBLE_DEVICES=0," in issue.fix and "unset" in issue.fix
    # the ranks get the spec's env: over the shell's, so that one decides and is named
    from_file = GPU2.model_copy(update={"env": {"CUDA_VISIBLE_DEVICES": "3,1,3"}})
    issue = cuda_visible_devices_issue(from_file, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert issue is not None and "(from the cluster file's env:) names GPU 3 twice" in issue.problem
    assert "CUDA_VISIBLE_DEVICES=3,1," in issue.fix
    fixed = GPU2.model_copy(update={"env": {"CUDA_VISIBLE_DEVICES": "0,1"}})
    assert cuda_visible_devices_issue(fixed, {"CUDA_VISIBLE_DEVICES": "0,0"}) is None
    assert cuda_visible_devices_issue(RunSpec(device="cpu", nproc_per_node=2), {"CUDA_VISIBLE_DEVICES": "0,0"}) is None
    assert cuda_visible_devices_issue(GPU2, {}) is None


def test_launch_issues_name_the_variable_not_the_count_it_spoils():
    """The launcher counts 1 GPU for "0,0" on a GPU node (CUDA stops at the repeat, NVML view): one
    issue, the cause. Too few entries for --gpus N is the GPU-count refusal, as before."""
    (issue,) = launch_issues(GPU2, platform="linux", visible_gpus=1, environ={"CUDA_VISIBLE_DEVICES": "0,0"})
    assert issue.field == "CUDA_VISIBLE_DEVICES"
    gpu4 = RunSpec(device="cuda", nproc_per_node=4)
    (issue,) = launch_issues(gpu4, platform="linux", visible_gpus=2, environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert issue.field == "nproc_per_node" and "Use --gpus 2" in issue.fix
    assert launch_issues(GPU2, platform="linux", visible_gpus=2, environ={"CUDA_VISIBLE_DEVICES": "2,3"}) == []


@pytest.mark.usefixtures("clean_environment")
def test_a_launch_with_a_repeated_gpu_exits_2_before_starting_anything(islab, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,0")  # no GPU here: the launcher counts its 2 entries
    monkeypatch.chdir(tmp_path)
    code, out, err = islab("--gpus", "2", "--log-dir", str(tmp_path / "logs"))
    assert code == 2 and out == ""
    assert err.startswith("error: CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES=0,0 (from this shell) names GPU 0 twice")
    assert not (tmp_path / "logs").exists()  # nothing launched, no run directory


def _isaaclab(nproc: int, *args: str, env: dict[str, str] | None = None) -> RunSpec:
    script = TREE / "scripts" / "reinforcement_learning" / "rsl_rl" / "train.py"
    return RunSpec(device="cuda", nproc_per_node=nproc, isaaclab=str(TREE), entrypoint={"script": str(script)},
                   args=("--task", "Isaac-Cartpole-v0", "--distributed", *args), env=env or {})  # fmt: skip


def test_cameras_on_more_than_one_gpu_of_a_node_are_warned_about_with_the_fix():
    warning = camera_warning(_isaaclab(2, "--enable_cameras"), {})
    assert warning is not None and warning.startswith("warning: cameras are enabled (--enable_cameras) on 2 GPUs")
    assert "cuda:0" in warning and "--gpus 1" in warning
    video = camera_warning(_isaaclab(4, "--video"), {})
    assert video is not None and "--video (Isaac Lab's train.py turns cameras on to record)" in video
    assert "ENABLE_CAMERAS=1" in (camera_warning(_isaaclab(2), {"ENABLE_CAMERAS": "1"}) or "")
    assert "ENABLE_CAMERAS=1" in (camera_warning(_isaaclab(2, env={"ENABLE_CAMERAS": "1"}), {}) or "")
    assert camera_warning(_isaaclab(1, "--enable_cameras"), {}) is None  # one GPU per node: cuda:0
    assert camera_warning(_isaaclab(2), {"ENABLE_CAMERAS": "0"}) is None
    assert camera_warning(RunSpec(device="cuda", nproc_per_node=2), {"ENABLE_CAMERAS": "1"}) is None  # our worker


@pytest.mark.usefixtures("clean_environment")
def test_the_camera_warning_is_printed_by_the_command(islab):
    base = ("--dry-run", "--isaaclab", str(TREE), "--task", "Isaac-Cartpole-v0", "--gpus")
    code, _, err = islab(*base, "2", "--", "--enable_cameras")
    assert code == 0 and "warning: cameras are enabled (--enable_cameras) on 2 GPUs per node" in err
    code, _, err = islab(*base, "1", "--", "--enable_cameras")
    assert code == 0 and "cameras are enabled" not in err
