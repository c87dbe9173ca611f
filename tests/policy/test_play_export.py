"""``islab-train play`` and ``islab-train export`` on runs trained through the real launcher.

One tiny CPU run per library path (rsl_rl, rl_games, skrl torch, skrl JAX; 1 rank, 64 envs, 2
iterations, a checkpoint after each: conftest's ``one_rank_run``) is shared by the tests of that
path, and with the TensorBoard tests. The export must give
the actions of the library's own deterministic inference (the adapter's
``deterministic_actions``) on 1,000 random observations, TorchScript and ONNX (onnxruntime) alike,
within 1e-5; rsl_rl trains with its observation normalizer on (off in the Cartpole config) so a
forgotten normalizer shows for every library. Play must be the deterministic policy: an episode
rollout driven by the exported TorchScript file reproduces play's numbers. The rest (bad input,
``best``, episode quotas, torch-free ``--help``) needs no training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from prerequisites import require_modules

from islab import rundir
from islab.policy.play import quotas, run_episodes, spread
from islab.policy.source import resolve_source

LIBRARY_PATHS = {"rsl_rl": ("rsl_rl", "torch"), "rl_games": ("rl_games", "torch"), "skrl": ("skrl", "torch"),
                 "skrl-jax": ("skrl", "jax")}  # fmt: skip
EVAL_KEYS = {
    "run_dir", "lib", "ml_framework", "task", "checkpoint", "checkpoint_choice", "checkpoint_iteration",
    "policy_sha256", "episodes", "num_envs", "device", "seed", "return", "length", "success_rate",
    "success_measure", "max_episode_length", "wall_s",
}  # fmt: skip
TOLERANCE = 1e-5

pytestmark = pytest.mark.skipif(
    int(os.environ.get("WORLD_SIZE", "1")) > 1 or int(os.environ.get("JAX_WORLD_SIZE", "1")) > 1,
    reason="importing skrl inside a distributed launch would join that job's process group",
)


def islab_train(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "islab.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(params=list(LIBRARY_PATHS))
def trained_run(request, one_rank_run) -> Path:
    lib, framework = LIBRARY_PATHS[request.param]
    if framework == "jax":
        require_modules("jax")
    return one_rank_run(lib, framework)


@pytest.mark.slow
def test_export_gives_the_librarys_own_actions(trained_run: Path) -> None:
    from islab.policy.loading import load_policy

    done = islab_train("export", str(trained_run))
    assert done.returncode == 0, done.stderr[-3000:]
    exported = trained_run / rundir.EXPORT_DIR
    description = json.loads((exported / "policy.json").read_text())
    spec = yaml.safe_load((trained_run / rundir.SPEC_FILE).read_text())
    assert (description["library"], description["ml_framework"]) == (spec["lib"], spec["ml_framework"])
    assert description["checkpoint_iteration"] == 2
    assert description["inputs"][0]["shape"] == ["batch", 4] and description["outputs"][0]["shape"] == ["batch", 1]
    assert description["inputs"][0]["order"][0] == "pole_angle"
    assert description["pipeline"]["observation_normalizer"]["folded_in"] is True
    assert "action_scale = 100.0" in description["action_scaling"]
    assert not list(exported.glob(".*tmp*")), "temporary files left behind"

    # the library's own deterministic inference, independently of the export's own check
    loaded = load_policy(resolve_source(trained_run), num_envs=1)
    try:
        observations = torch.randn(1000, 4, generator=torch.Generator().manual_seed(7)) * 2.0
        reference = loaded.adapter.deterministic_actions(observations).detach().cpu()
    finally:
        loaded.close()
    import onnxruntime

    scripted = torch.jit.load(str(exported / "policy.pt"))(observations)
    session = onnxruntime.InferenceSession(str(exported / "policy.onnx"), providers=["CPUExecutionProvider"])
    onnx_actions = session.run(None, {"obs": observations.numpy()})[0]
    assert scripted.shape == reference.shape == (1000, 1)
    assert float((scripted - reference).abs().max()) <= TOLERANCE
    assert float(np.abs(onnx_actions - reference.numpy()).max()) <= TOLERANCE
    assert float(reference.std()) > 0.0  # not a constant policy: the comparison means something


@pytest.mark.slow
@pytest.mark.parametrize("trained_run", ["rsl_rl"], indirect=True)
def test_export_without_the_onnx_extra_writes_torchscript(trained_run: Path) -> None:
    """TorchScript needs only torch: without onnx/onnxruntime export writes policy.pt, says how to
    get ONNX too, and removes an older policy.onnx that would no longer match."""
    exported = trained_run / rundir.EXPORT_DIR
    exported.mkdir(exist_ok=True)
    (exported / "policy.onnx").write_text("an older export")
    hide_onnx = "import sys; sys.modules['onnx'] = sys.modules['onnxruntime'] = None; "
    done = subprocess.run(
        [sys.executable, "-c", hide_onnx + "from islab.policy.export import main; sys.exit(main(sys.argv[1:]))",
         str(trained_run)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "policy.onnx not written: onnx, onnxruntime not installed" in done.stdout
    assert 'pip install -c torch-pin.txt -e ".[onnx]"' in done.stdout  # as README installs it
    description = json.loads((exported / "policy.json").read_text())
    assert list(description["files"]) == ["policy.pt"]
    assert list(description["checked"]["max_abs_difference"]) == ["torchscript"]
    assert not (exported / "policy.onnx").exists()
    assert torch.jit.load(str(exported / "policy.pt"))(torch.zeros(3, 4)).shape == (3, 1)


@pytest.mark.slow
def test_play_is_the_deterministic_policy_and_writes_play_json(trained_run: Path) -> None:
    done = islab_train("play", str(trained_run), "--episodes", "6", "--num-envs", "3", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    written = json.loads((trained_run / rundir.PLAY_FILE).read_text())
    assert printed == written and set(written) >= EVAL_KEYS
    assert written["episodes"] == 6 and written["checkpoint_iteration"] == 2
    ret, length = written["return"], written["length"]
    assert 1 <= length["min"] <= length["mean"] <= length["max"] <= written["max_episode_length"]
    assert ret["min"] <= ret["mean"] <= ret["max"] <= length["max"]  # Cartpole earns at most 1 per step
    assert 0.0 <= written["success_rate"] <= 1.0

    # the same episodes, driven by the exported TorchScript policy (export ran first for this run,
    # else export now): play must have acted deterministically with that policy
    exported = trained_run / rundir.EXPORT_DIR / "policy.pt"
    if not exported.is_file():
        assert islab_train("export", str(trained_run)).returncode == 0
    from islab.envs import make_env

    policy = torch.jit.load(str(exported))
    env = make_env(written["task"], 3, "cpu", seed=written["seed"])
    with torch.no_grad():
        replay = run_episodes(env, policy, 6, written["seed"])
    assert spread([float(n) for n in replay["lengths"]]) == pytest.approx(length, abs=0.5)
    assert spread(replay["returns"]) == pytest.approx(ret, abs=1e-2)


# -- no training needed -------------------------------------------------------------------------


def fake_run(tmp_path: Path, progress: list[dict] | None = None, checkpoints: tuple[str, ...] = ()) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / rundir.CHECKPOINTS_DIR).mkdir(parents=True)
    spec = {"lib": "rsl_rl", "ml_framework": "torch", "task": "Islab-Cartpole-v0"}
    rundir.write_yaml(run_dir / rundir.SPEC_FILE, spec)
    rundir.write_yaml(run_dir / rundir.AGENT_FILE, {"seed": 1})
    for record in progress or ():
        rundir.ProgressWriter(run_dir).append(record)
    for name in checkpoints:
        (run_dir / rundir.CHECKPOINTS_DIR / name).write_bytes(b"not read here")
    return run_dir


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, islab) -> None:
    run_dir = fake_run(tmp_path)
    cases = [
        (("play", str(tmp_path / "missing")), "error: RUN_DIR:"),
        (("export", str(tmp_path)), "error: RUN_DIR:"),  # a directory, but no spec.yaml
        (("play", str(run_dir)), "error: --checkpoint:"),  # no checkpoints/latest.pt yet
        (("export", str(run_dir), "--checkpoint", "nope"), "error: --checkpoint:"),
        (("play", str(run_dir), "--episodes", "0"), "error: --episodes:"),
        (("play", str(run_dir), "--device", "tpu"), "error: --device:"),
    ]
    for args, start in cases:
        code, _out, err = islab(*args)
        assert code == 2, args
        assert err.startswith(start) and err.count("\n") == 1, (args, err)
    assert not (run_dir / rundir.PLAY_FILE).exists() and not (run_dir / rundir.EXPORT_DIR).exists()


@pytest.mark.slow  # the session's one 1-rank rsl_rl run (trained here when no other test did)
def test_a_run_stopped_before_its_first_checkpoint_is_told_a_command_that_trains_it_again(
    tmp_path: Path, islab, one_rank_run
) -> None:
    """Issue 30 item 3: play (and export) of a run with no checkpoint used to advise ``--resume
    RUN_DIR``, which is refused (nothing to resume from). The advice is a command that works: the run's
    own options (its launch.yaml), here checked as a dry run."""
    import shlex
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(one_rank_run("rsl_rl"), run_dir)
    shutil.rmtree(run_dir / rundir.CHECKPOINTS_DIR)  # stopped before the first one
    for command in ("play", "export"):
        code, _out, err = islab(command, str(run_dir))
        assert code == 2 and err.startswith("error: --checkpoint:") and err.count("\n") == 1, err
        assert "--resume" not in err and "stopped (or is still running) before the first one" in err, err
    again = err.split("saves every N iterations): ", 1)[1].split(", or pass a checkpoint file")[0]
    argv = shlex.split(again)
    assert argv[0] == "islab-train" and "actor.obs_normalization=true" in argv, again
    code, out, err = islab(*argv[1:], "--dry-run")
    assert code == 0, err
    for planned in ("--lib rsl_rl", "--num-envs 64", "--max-iterations 2", "--checkpoint-interval 1",
                    "actor.obs_normalization=true"):  # fmt: skip
        assert planned in out, (planned, out)


def test_best_is_the_kept_checkpoint_with_the_highest_recorded_return(tmp_path: Path) -> None:
    progress = [{"iteration": it, "mean_return": ret} for it, ret in ((1, 5.0), (2, 40.0), (3, 20.0), (4, 90.0))]
    run_dir = fake_run(tmp_path, progress, ("iter_1.pt", "iter_2.pt", "iter_3.pt", "latest.pt"))
    best = resolve_source(run_dir, "best")  # iteration 4 scored higher but its checkpoint is gone
    assert best.checkpoint.name == "iter_2.pt" and "iteration 2" in best.note
    assert resolve_source(run_dir).checkpoint.name == "latest.pt"
    path = run_dir / rundir.CHECKPOINTS_DIR / "iter_3.pt"
    assert resolve_source(run_dir, str(path)).checkpoint == path
    unscored = fake_run(tmp_path / "other", [{"iteration": 1, "mean_return": None}], ("iter_1.pt", "latest.pt"))
    fallback = resolve_source(unscored, "best")
    assert fallback.checkpoint.name == "latest.pt" and "latest" in fallback.note


class CountingEnv:
    """Env i ends every episode after i + 2 steps with reward 1 per step; even envs fail
    (terminated), odd envs time out (truncated, a success)."""

    num_envs, max_episode_length, device = 3, 10, torch.device("cpu")

    def __init__(self) -> None:
        self.clock = torch.zeros(3, dtype=torch.long)
        self.lengths = torch.arange(3) + 2

    def reset(self, seed: int | None = None):
        self.clock.zero_()
        return {"policy": torch.zeros(3, 4)}, {}

    def step(self, actions):
        self.clock += 1
        done = self.clock >= self.lengths
        terminated = done & (torch.arange(3) % 2 == 0)
        self.clock[done] = 0
        return {"policy": torch.zeros(3, 4)}, torch.ones(3), terminated, done & ~terminated, {}

    def episode_success(self, terminated, truncated):
        return truncated & ~terminated


def test_every_env_counts_only_its_quota_of_episodes() -> None:
    assert quotas(7, 3) == [3, 2, 2]
    played = run_episodes(CountingEnv(), lambda obs: torch.zeros(len(obs), 1), 7, seed=0)
    # first-come counting would take env 0's short episodes more often: 2,2,3,2,4,3,2 ...
    assert sorted(played["lengths"]) == [2, 2, 2, 3, 3, 4, 4]
    assert sorted(played["returns"]) == [2.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]
    assert sum(played["successes"]) == 2  # env 1's two episodes
    assert spread([1.0, 3.0]) == {"mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}


def test_play_help_and_bad_input_import_no_torch(tmp_path: Path) -> None:
    for args, code in ((("play", "--help"), 0), (("export", str(tmp_path / "missing")), 2)):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "islab.cli", *args], capture_output=True, text=True, check=False
        )
        assert done.returncode == code, done.stderr[-2000:]
        imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                    if line.startswith("import time:")}  # fmt: skip
        assert imported.isdisjoint({"torch", "numpy", "gymnasium", "jax"}), args
    assert (
        "--episodes"
        in subprocess.run(
            [sys.executable, "-m", "islab.cli", "play", "--help"], capture_output=True, text=True, check=False
        ).stdout
    )
