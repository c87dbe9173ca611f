"""The dry run is the launcher's contract: for every cluster file in configs/cluster/ and a set of
varied command lines, ``islab-train ... --dry-run`` (text and ``--json``) prints exactly what it
printed when these golden files were recorded.

It guards refactors of resolution and planning ("behaviour does not change"): a changed value, a
changed source or origin, a changed argv or message shows up as a diff against ``tests/plan/golden/``.
What legitimately varies between runs and machines is normalised before comparing: the Python
interpreter, the repository and temporary paths, the launch time in run-directory names, the
free port (fixed by patching the probe) and the spec digest of multi-node run directories (it
covers the interpreter path).

Recording (only when the change of output is intended, and say so in the commit):
``ISLAB_GOLDEN_RECORD=1 python -m pytest tests/plan/test_dry_run_golden.py``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
from paths import REPO

import islab

SRC = Path(islab.__file__).resolve().parent.parent  # where islab is imported from (the agent configs' paths)
GOLDEN = Path(__file__).resolve().parent / "golden" / "dry_run"
CLUSTER_FILES = sorted((REPO / "configs" / "cluster").glob("*.yaml"))
RECORD = os.environ.get("ISLAB_GOLDEN_RECORD") == "1"
FREE_PORT = 29999
cli_app = importlib.import_module("islab.cli.app")  # the module (islab.cli.app is also the Typer app)

# A fake srun step on the second of three nodes (as tests/e2e/test_slurm.py fakes one).
SRUN = {
    "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NNODES": "3",
    "SLURM_STEP_NUM_NODES": "3", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-02],cpu7",
    "SLURM_STEP_NODELIST": "gpu[01-02],cpu7", "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
}  # fmt: skip

# name -> (arguments before --dry-run, environment variables); "{run}" is the tiny real run's directory.
CASES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    **{f"cluster-{path.stem}": (("--cluster", str(path)), {}) for path in CLUSTER_FILES},
    "cpu-nproc": (("--device", "cpu", "--nproc", "2", "--num-envs", "64", "--max-iterations", "3"), {}),
    "gpus-2": (("--lib", "rl_games", "--gpus", "2", "--seed", "7"), {}),
    "skrl-jax": (("--lib", "skrl", "--ml-framework", "jax", "--device", "cpu", "--nproc", "2"), {}),
    "c10d-cluster": (
        (
            "--nnodes",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "node0:29400",
            "--rdzv-id",
            "job7",
            "--device",
            "cpu",
            "--nproc",
            "2",
        ),
        {},
    ),
    "node-rank-1": (("--cluster", str(REPO / "configs/cluster/two-node-static.yaml"), "--node-rank", "1"), {}),
    "overrides": (
        ("--lib", "rsl_rl", "--device", "cpu", "algorithm.learning_rate=0.0005", "num_steps_per_env=8"),
        {},
    ),
    "total-env-steps": (("--device", "cpu", "--nproc", "2", "--total-env-steps", "100000"), {}),
    "file-with-cli-iterations": (
        ("--cluster", str(REPO / "configs/cluster/cpu.yaml"), "--total-env-steps", "50000", "--seed", "3"),
        {},
    ),
    "script": (("--script", "train.py", "--device", "cpu", "--nproc", "2", "--", "--epochs", "3"), {}),
    "module": (("--module", "my_pkg.train", "--gpus", "2", "--", "--lr", "0.1"), {}),
    "command": (("--command", "train", "--device", "cpu"), {}),
    "islab-env": (
        ("--device", "cpu"),
        {
            "ISLAB_NUM_ENVS": "32",
            "ISLAB_SEED": "5",
            "ISLAB_LIB": "skrl",
            "ISLAB_NPROC": "2",
            "ISLAB_MAX_ITERATIONS": "4",
        },
    ),
    "env-under-cli": (("--num-envs", "16", "--device", "cpu"), {"ISLAB_NUM_ENVS": "32", "ISLAB_SEED": "9"}),
    "slurm-static": (("--device", "cpu", "--nproc", "2"), SRUN),
    "slurm-c10d": (("--lib", "rl_games", "--rdzv-backend", "c10d", "--device", "cpu"), SRUN),
    "slurm-skrl-jax": (("--lib", "skrl", "--ml-framework", "jax", "--device", "cpu"), SRUN),
    "slurm-under-cli": (("--device", "cpu", "--node-rank", "2"), {**SRUN, "ISLAB_NNODES": "5"}),
    "resume-run-dir": (("--resume", "{run}"), {}),
    "resume-run-dir-override": (("--resume", "{run}", "--max-iterations", "5", "--seed", "11"), {}),
    "resume-checkpoint-file": (("--resume", "{run}/checkpoints/latest.pt", "--device", "cpu"), {}),
    # refusals are output too: the message names the field and where it came from
    "error-resume-frozen-field": (("--resume", "{run}", "--lib", "skrl"), {}),
    "error-node-disagrees-with-file": (
        (
            "--cluster",
            str(REPO / "configs/cluster/two-node-static.yaml"),
            "--node-rank",
            "1",
            "--seed",
            "1",
            "--preflight",
            "off",
        ),
        {},
    ),
    "error-env-value": (("--device", "cpu"), {"ISLAB_NUM_ENVS": "-3"}),
    "error-file-key": (("--cluster", str(REPO / "configs/cluster/cpu.yaml"), "no_such_key=1"), {}),
    "error-resume-missing": (("--resume", "{run}/checkpoints/nothing.pt"), {}),
}

pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory made by a real (one CPU rank, one iteration) training run."""
    from islab import cli

    logs = tmp_path_factory.mktemp("golden") / "logs"
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith(("ISLAB_", "SLURM_"))}
    try:
        code = cli.run(["--device", "cpu", "--nproc", "1", "--num-envs", "8", "--max-iterations", "1",
                        "--seed", "13", "--log-dir", str(logs)])  # fmt: skip
    finally:
        os.environ.update(saved)
    assert code == 0
    (run_dir,) = (logs / "rsl_rl" / "Islab-Cartpole-v0").iterdir()
    return run_dir


def normalise(text: str, run_dir: Path) -> str:
    """Replace what legitimately varies between runs and machines by placeholders."""
    text = text.replace(sys.executable, "<PYTHON>")  # first: a venv inside the checkout would read <REPO>/...
    places = ((run_dir.parent.parent.parent.parent, "<TMP>"), (SRC, "<SRC>"), (REPO, "<REPO>"))
    for path, placeholder in places:
        text = text.replace(str(path), placeholder)
    text = re.sub(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}", "<TIME>", text)
    return re.sub(r"spec-[0-9a-f]{10}", "spec-<DIGEST>", text)


def dry_run(islab, monkeypatch, args: tuple[str, ...], environ: dict[str, str], *json_flag: str) -> dict:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code, out, err = islab(*args[: args.index("--")] if "--" in args else args, "--dry-run", *json_flag,
                           *args[args.index("--"):] if "--" in args else ())  # fmt: skip
    return {"exit": code, "stdout": out, "stderr": err}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_dry_run_prints_what_it_printed_before(case: str, islab, monkeypatch, tiny_run: Path) -> None:
    monkeypatch.setattr(cli_app, "find_free_port", lambda: FREE_PORT)
    monkeypatch.chdir(tiny_run.parent)  # relative log directories land beside the tiny run
    args, environ = CASES[case]
    args = tuple(arg.replace("{run}", str(tiny_run)) for arg in args)
    seen = {
        "args": [normalise(arg, tiny_run) for arg in args],
        "environ": environ,
        "text": dry_run(islab, monkeypatch, args, environ),
        "json": dry_run(islab, monkeypatch, args, environ, "--json"),
    }
    seen = json.loads(normalise(json.dumps(seen, indent=1), tiny_run))
    golden = GOLDEN / f"{case}.json"
    if RECORD:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(seen, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(golden.read_text(encoding="utf-8"))
    assert seen["text"]["exit"] == (2 if case.startswith("error-") else 0), seen["text"]["stderr"]
    for form in ("text", "json"):
        assert seen[form] == expected[form], f"{case} ({form}) differs from {golden}"


def test_every_cluster_file_is_covered() -> None:
    assert CLUSTER_FILES and all(f"cluster-{path.stem}" in CASES for path in CLUSTER_FILES)
