"""Isaac Lab 3.0 trains its own ``Isaac-Cartpole`` through ``islab-train --isaaclab auto`` on one CPU
process, with rsl_rl, skrl and rl_games: Isaac Lab's real trainer (kit-less: Newton's MuJoCo-Warp
solver on Warp's CPU backend), islab-train's real launcher and supervision, no mocks, no network.

Each run: 64 envs, 3 iterations; islab-train exits 0, its summary shows the iterations Isaac Lab's
TensorBoard events report, and Isaac Lab wrote a checkpoint into the run folder islab named
(``logs/<lib>/cartpole/<run timestamp>...``: the ``--run_timestamp`` islab-train passed). Then the
run plays back (``islab-train play RUN``: Isaac Lab's own play, stopped after 3 s of playing) and
resumes (``islab-train --resume RUN --max-iterations 2``: Isaac Lab's own resume options).

What a CPU run of Isaac Lab 3 needs (docs/ISAACLAB.md, "On a CPU"), set here as a user would:

* the two USD files the task loads, built from the installed packages (asset_mirror.py) under
  ``ISAACSIM_ASSET_ROOT``;
* ``physics=newton_mjwarp`` (no Isaac Sim here, so no PhysX) and the learner's device, which
  ``--device cpu`` sets for the preset (rsl_rl ``agent.device``, rl_games ``agent.params.config.device*``);
* per library, what 64 envs x 3 iterations need: rl_games' minibatch must divide its 1,024-step
  batch and torch.compile (~90 s on CPU) is off; skrl writes its events every 16 timesteps (one
  iteration) instead of every ``timesteps / 100`` (0 here: none).

Warp compiles its CPU kernels once (~53 s) into ``WARP_CACHE_PATH`` (one folder for the job, set by
scripts/test.sh; a fresh temporary one otherwise); the first run pays for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from child_env import child_env
from isaaclab3_venv import ISAACLAB_PYTHON, require_isaaclab3

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ITERATIONS = 3
LIBRARY_OVERRIDES = {
    "rsl_rl": (),
    "rl_games": ("agent.params.config.minibatch_size=512", "agent.params.config.torch_compile=false"),
    "skrl": ("agent.agent.experiment.write_interval=16",),
}


@pytest.fixture(scope="module")
def cpu_setup(tmp_path_factory) -> dict[str, str]:
    """The asset mirror (built once) and the Warp kernel cache: the environment every run adds."""
    require_isaaclab3()
    mirror = tmp_path_factory.mktemp("isaac-assets")
    subprocess.run([str(ISAACLAB_PYTHON), str(HERE / "asset_mirror.py"), str(mirror)], check=True, timeout=120)
    warp_cache = os.environ.get("WARP_CACHE_PATH") or tempfile.mkdtemp(prefix="islab-warp-cache-")
    return {"ISAACSIM_ASSET_ROOT": str(mirror), "WARP_CACHE_PATH": warp_cache}


def train(workdir: Path, lib: str, environ: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    """``islab-train --isaaclab auto --device cpu --nproc 1`` for Isaac-Cartpole, in ``workdir``."""
    argv = [sys.executable, "-m", "islab.cli", "--isaaclab", "auto", "--python", str(ISAACLAB_PYTHON),
            "--task", "Isaac-Cartpole", "--lib", lib, "--device", "cpu", "--nproc", "1", "--num-envs", "64",
            "--max-iterations", str(ITERATIONS), "physics=newton_mjwarp", *LIBRARY_OVERRIDES[lib], *extra]  # fmt: skip
    env = child_env(("ISLAB_", "SLURM_")) | environ
    return subprocess.run(argv, cwd=workdir, capture_output=True, text=True, env=env, timeout=600)


CHECKPOINTS = {"rsl_rl": "model_*.pt", "rl_games": "nn/*.pth", "skrl": "checkpoints/agent_*.pt"}


def summary_iterations(stdout: str) -> int | None:
    """The iterations row of islab-train's summary table."""
    found = re.search(r"iterations\s+│ (\d+) ", stdout)
    return int(found.group(1)) if found else None


@pytest.fixture(scope="module", params=["rsl_rl", "skrl", "rl_games"])
def trained(request, cpu_setup, tmp_path_factory) -> tuple[str, Path, subprocess.CompletedProcess]:
    """One training per library, shared by the tests that read it: (library, working directory, result)."""
    workdir = tmp_path_factory.mktemp(f"isaaclab3-{request.param}")
    return request.param, workdir, train(workdir, request.param, cpu_setup)


def test_isaac_lab_3_trains_cartpole_on_one_cpu_process(trained):
    lib, workdir, done = trained
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Traceback" not in done.stderr, done.stderr[-5000:]
    # our summary, from Isaac Lab's own TensorBoard events (skrl counts timesteps: 16 per iteration)
    assert "run finished" in done.stdout, done.stdout[-3000:]
    assert summary_iterations(done.stdout) == (ITERATIONS * 16 if lib == "skrl" else ITERATIONS), done.stdout[-3000:]
    # Isaac Lab's run folder is the one islab-train named (its --run_timestamp), with a checkpoint in it
    (run_dir,) = (workdir / "logs" / f"isaaclab-{lib}" / "Isaac-Cartpole").iterdir()
    (folder,) = (workdir / "logs" / lib / "cartpole").glob(f"{run_dir.name}*")
    assert sorted(folder.glob(CHECKPOINTS[lib])), sorted(path.name for path in folder.rglob("*"))
    assert (run_dir / "logs" / "rank_0.log").stat().st_size > 0


def test_the_run_plays_back_and_resumes(trained, cpu_setup):
    lib, workdir, done = trained
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (workdir / "logs" / f"isaaclab-{lib}" / "Isaac-Cartpole").iterdir()
    env = child_env(("ISLAB_", "SLURM_")) | cpu_setup
    play = subprocess.run([sys.executable, "-m", "islab.cli", "play", str(run_dir), "--seconds", "3"], cwd=workdir,
                          capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert play.returncode == 0 and "stopped Isaac Lab's play after 3 s" in play.stderr, (
        play.stdout[-3000:] + play.stderr[-3000:]
    )
    assert "Policy playback is running" in play.stdout + play.stderr
    resume = subprocess.run([sys.executable, "-m", "islab.cli", "--resume", str(run_dir), "--max-iterations", "2"],
                            cwd=workdir, capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert resume.returncode == 0, resume.stdout[-3000:] + resume.stderr[-5000:]
    assert "Loading" in resume.stdout + resume.stderr + (run_dir / "logs" / "rank_0.log").read_text()
    assert summary_iterations(resume.stdout), resume.stdout[-3000:]
