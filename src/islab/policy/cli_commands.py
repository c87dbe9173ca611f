"""``islab-train play`` and ``islab-train export`` as plain functions (torch-free).

The command line parses the options and calls :func:`play_command` / :func:`export_command`
with plain values. They check what can be checked without torch (the run directory, the
checkpoint choice, the counts: one ``error: ...`` line and exit 2 on a mistake, nothing started),
then run the work in a child process, ``python -m islab.policy.play`` or ``... .export``, with the
library's environment fixes (``GIT_PYTHON_REFRESH`` for rsl_rl, ``JAX_PLATFORMS=cpu`` for JAX on
the CPU) and without the rank variables of any job this runs inside. The child's exit status is
the command's: 0 done, 2 a checkpoint or device it cannot use, 1 a crash.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from islab.policy.loading import job_free_environment
from islab.policy.source import PolicySource, resolve_source
from islab.spec.issues import Issue, SpecError

DEVICES = ("cpu", "cuda")


def _check(run_dir: str | Path, checkpoint: str, device: str, counts: dict[str, int | None]) -> PolicySource:
    for option, value in counts.items():
        if value is not None and value < 1:
            raise SpecError(Issue(option, f"must be at least 1, got {value}", f"Give e.g. {option} 32"))
    if device not in DEVICES:
        raise SpecError(Issue("--device", f"{device!r} is not one of {', '.join(DEVICES)}", "Use --device cpu"))
    return resolve_source(run_dir, checkpoint)


def _run_child(module: str, args: list[str], source: PolicySource, device: str, python: str | None) -> int:
    command = [python or sys.executable, "-m", module, *args]
    env = job_free_environment(dict(os.environ), source.lib, source.ml_framework, device)
    return subprocess.run(command, env=env, check=False).returncode


def play_command(
    run_dir: str | Path,
    *,
    checkpoint: str = "latest",
    episodes: int = 32,
    num_envs: int | None = None,
    device: str = "cpu",
    json_output: bool = False,
    python: str | None = None,
) -> int:
    """``islab-train play``: exit status (0 ok, 2 bad input)."""
    try:
        source = _check(run_dir, checkpoint, device, {"--episodes": episodes, "--num-envs": num_envs})
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    args = [str(run_dir), "--checkpoint", checkpoint, "--episodes", str(episodes), "--device", device]
    args += ["--num-envs", str(num_envs)] if num_envs is not None else []
    args += ["--json"] if json_output else []
    return _run_child("islab.policy.play", args, source, device, python)


def export_command(run_dir: str | Path, *, checkpoint: str = "latest", python: str | None = None) -> int:
    """``islab-train export``: exit status (0 ok, 2 bad input)."""
    try:
        source = _check(run_dir, checkpoint, "cpu", {})
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    return _run_child("islab.policy.export", [str(run_dir), "--checkpoint", checkpoint], source, "cpu", python)
