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

from islab.policy import isaaclab_play
from islab.policy.isaaclab_play import isaaclab_run
from islab.policy.loading import job_free_environment
from islab.policy.play import DEFAULT_EPISODES, MAX_DEFAULT_ENVS
from islab.policy.source import PolicySource, resolve_source
from islab.spec.issues import Issue, SpecError

DEVICES = ("cpu", "cuda")
ISAACLAB_ONLY = ("--seconds",)  # Isaac Lab's play takes it (both take --video and --video-length)
ISLAB_ONLY = ("--episodes", "--json", "--envs")  # islab's play counts episodes, reports them, tiles --envs


def _options_for_the_other(isaaclab: bool, **given: object) -> Issue | None:
    """An option of the other kind of play, given for this run."""
    names = {"episodes": "--episodes", "json_output": "--json", "video": "--video", "video_length": "--video-length",
             "seconds": "--seconds", "envs": "--envs"}  # fmt: skip
    used = [names[key] for key, value in given.items() if value not in (None, False)]
    wrong = [name for name in used if name in (ISLAB_ONLY if isaaclab else ISAACLAB_ONLY)]
    if not wrong:
        return None
    if isaaclab:
        return Issue(wrong[0], "Isaac Lab's play runs until it is stopped and reports nothing islab can read",
                     "Give --seconds S to stop it after S seconds, or --video (it stops after one clip)")  # fmt: skip
    return Issue(wrong[0], "applies to runs of Isaac Lab's trainer (islab-train --isaaclab), which Isaac Lab plays",
                 "islab's play runs --episodes episodes and stops by itself")  # fmt: skip


def _video_issue(video: bool, video_length: int | None, envs: int | None, parallel: int | None) -> Issue | None:
    """``--video-length`` and ``--envs`` shape a video: without ``--video`` they would do nothing;
    ``--envs`` cannot show more envs than play runs (``parallel``: its env count, when known)."""
    for option, value in (("--video-length", video_length), ("--envs", envs)):
        if value is not None and not video:
            return Issue(option, "shapes the video that --video records, and --video was not given",
                         f"Add --video, or leave out {option}")  # fmt: skip
    if envs is not None and parallel is not None and envs > parallel:
        return Issue("--envs", f"{envs} envs cannot be recorded out of the {parallel} play runs (--num-envs, "
                     "default: --episodes)", f"Give --envs {parallel} or less, or --num-envs {envs}")  # fmt: skip
    return None


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
    episodes: int | None = None,
    num_envs: int | None = None,
    device: str | None = None,
    json_output: bool = False,
    python: str | None = None,
    video: bool = False,
    video_length: int | None = None,
    seconds: float | None = None,
    envs: int | None = None,
) -> int:
    """``islab-train play``: exit status (0 ok, 2 bad input). A run of Isaac Lab's trainer is played
    by Isaac Lab (:mod:`islab.policy.isaaclab_play`); only that play takes ``seconds``, only islab's
    ``episodes``, ``json_output`` and ``envs``; both record ``video`` (``video_length`` frames)."""
    run = isaaclab_run(run_dir)
    wrong = _options_for_the_other(run is not None, episodes=episodes, json_output=json_output, video=video,
                                   video_length=video_length, seconds=seconds, envs=envs)  # fmt: skip
    parallel = None if run is not None else num_envs or min(episodes or DEFAULT_EPISODES, MAX_DEFAULT_ENVS)
    wrong = wrong or _video_issue(video, video_length, envs, parallel)
    if wrong is not None:
        print(wrong.message(), file=sys.stderr)
        return 2
    if run is not None:
        return isaaclab_play.play_command(run, checkpoint=checkpoint, num_envs=num_envs, device=device, video=video,
                                          video_length=video_length, seconds=seconds)  # fmt: skip
    episodes = DEFAULT_EPISODES if episodes is None else episodes
    device = "cpu" if device is None else device
    try:
        counts = {"--episodes": episodes, "--num-envs": num_envs, "--video-length": video_length, "--envs": envs}
        source = _check(run_dir, checkpoint, device, counts)
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    args = [str(run_dir), "--checkpoint", checkpoint, "--episodes", str(episodes), "--device", device]
    args += ["--num-envs", str(num_envs)] if num_envs is not None else []
    args += ["--json"] if json_output else []
    args += ["--video"] if video else []
    args += ["--video-length", str(video_length)] if video_length is not None else []
    args += ["--envs", str(envs)] if envs is not None else []
    return _run_child("islab.policy.play", args, source, device, python)


def export_command(run_dir: str | Path, *, checkpoint: str = "latest", python: str | None = None) -> int:
    """``islab-train export``: exit status (0 ok, 2 bad input). A run of Isaac Lab's trainer: its
    rsl_rl play's exports (:mod:`islab.policy.isaaclab_play`)."""
    run = isaaclab_run(run_dir)
    if run is not None:
        return isaaclab_play.export_command(run, checkpoint=checkpoint)
    try:
        source = _check(run_dir, checkpoint, "cpu", {})
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    return _run_child("islab.policy.export", [str(run_dir), "--checkpoint", checkpoint], source, "cpu", python)
