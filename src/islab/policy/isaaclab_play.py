"""``islab-train play RUN`` and ``export RUN`` for a run of Isaac Lab's trainer: Isaac Lab's own play.

A run of ``--isaaclab`` holds Isaac Lab's checkpoints, not islab's (:mod:`islab.rundir.trainer_runs`),
so Isaac Lab's play script plays them, run as the training ran it (the interpreter and the
environment of its ``launch.yaml``, one process):

* Isaac Lab 3 (the training ran ``isaaclab_rl/entrypoints/multigpu.py --rl_library L``):
  ``python -m isaaclab play --rl_library L ...``, the ``isaaclab play`` command;
* Isaac Lab 2.x: the ``play.py`` beside the ``train.py`` that trained (``scripts/reinforcement_learning/<lib>/``;
  the unified ``scripts/reinforcement_learning/play.py --rl_library L`` of a checkout that has one).

Its arguments: ``--task`` and what shapes the environment and the agent the same way as in training
(``--device``, ``--agent``, skrl's ``--ml_framework``/``--algorithm``, ``--experiment_name``, ``--seed``,
2.x's ``--headless``/``--enable_cameras``, and every Hydra ``KEY=VALUE`` override, ``physics=``/``presets=``
included), then ``--checkpoint PATH`` -- the newest complete checkpoint, or the file given -- and,
when asked, ``--num_envs N``, ``--video``, ``--video_length N`` (Isaac Lab records one clip into
``<checkpoint folder>/videos/play/`` and ends its play).

Isaac Lab's play otherwise runs until it is stopped: ``--seconds S`` stops it as Ctrl-C would (SIGINT;
it ends cleanly) after S seconds. ``export``: Isaac Lab's rsl_rl play writes ``exported/policy.pt``
(TorchScript) and ``exported/policy.onnx`` next to the checkpoint before it plays; export runs it
until both files are written, then stops it. Isaac Lab's rl_games and skrl plays export nothing.

Torch-free: the work is Isaac Lab's, in a child process.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from islab.policy.loading import job_free_environment
from islab.resolve.isaaclab3 import is_isaaclab3_entry
from islab.resolve.isaaclab_resume import FLAGS, VALUED, without_options
from islab.rundir import LAUNCH_FILE
from islab.rundir.trainer_runs import newest_checkpoint
from islab.spec.issues import Issue, SpecError

PLAY_COMMAND_3 = ("-m", "isaaclab", "play")  # Isaac Lab 3's `isaaclab play` (isaaclab/__main__.py)
PLAY_SCRIPT = "play.py"  # Isaac Lab 2.x: beside each train.py
KEPT_OPTIONS = (
    "--task", "--rl_library", "--device", "--agent", "--ml_framework", "--algorithm", "--experiment_name", "--seed",
)  # fmt: skip
KEPT_FLAGS = ("--headless", "--enable_cameras")
EXPORT_DIR = "exported"
EXPORTED = ("policy.pt", "policy.onnx")  # what Isaac Lab's rsl_rl play writes there
EXPORTS = ("rsl_rl",)  # the libraries whose Isaac Lab play exports
STOP_GRACE_S = 30.0  # after our SIGINT: Isaac Lab closes its simulation
# What Isaac Lab's play prints once it plays: 3.x's playback loop; 2.x's scripts as they load the policy
PLAYING_3 = "Policy playback is running"
PLAYING_2 = "Loading model checkpoint from"
STARTUP_LIMIT_S = 600.0  # --seconds: stopped anyway this long after the start when it never said it plays
POLL_S = 0.2


@dataclass(frozen=True)
class IsaacLabRun:
    """A run of Isaac Lab's trainer, as its ``launch.yaml`` has it."""

    run_dir: Path
    python: str
    script: str  # what each rank ran
    args: tuple[str, ...]  # its arguments, without those of a resume
    library: str
    ml_framework: str
    env: Mapping[str, str] = field(default_factory=dict)


def isaaclab_run(run_dir: str | Path) -> IsaacLabRun | None:
    """The run of Isaac Lab's trainer in ``run_dir``; None when ``run_dir`` holds another kind of run."""
    import yaml

    try:
        record = yaml.safe_load(Path(run_dir, LAUNCH_FILE).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    spec = record.get("spec") if isinstance(record, dict) else None
    if not isinstance(spec, dict) or not spec.get("isaaclab") or not isinstance(spec.get("entrypoint"), dict):
        return None
    stored = tuple(without_options(spec.get("args") or (), VALUED, FLAGS))  # not those of a resume
    return IsaacLabRun(
        run_dir=Path(run_dir), python=str(spec.get("python") or sys.executable),
        script=str(spec["entrypoint"].get("script", "")), args=stored,
        library=str(spec.get("lib", "rsl_rl")), ml_framework=str(spec.get("ml_framework", "torch")),
        env={str(name): str(value) for name, value in (spec.get("env") or {}).items()},
    )  # fmt: skip


def chosen_checkpoint(run: IsaacLabRun, choice: str) -> Path:
    """``latest``: the newest complete checkpoint of the run; a path: that file. SpecError otherwise."""
    if choice == "latest":
        newest = newest_checkpoint(run.run_dir, run.library)
        if newest is None:
            fix = f"Train it further (islab-train --resume {run.run_dir}) or pass a checkpoint file"
            raise SpecError(Issue("--checkpoint", f"{run.run_dir} holds no checkpoint of Isaac Lab's trainer yet", fix))
        return newest.path
    if choice == "best":
        raise SpecError(Issue("--checkpoint", "best needs islab's progress records, which Isaac Lab's trainer does "
                              "not write", "Use latest or the path of one of its checkpoints"))  # fmt: skip
    path = Path(choice)
    if not path.is_file():
        raise SpecError(Issue("--checkpoint", f"{choice!r} is neither latest nor an existing file",
                              "Use latest or the path of one of the run's checkpoints"))  # fmt: skip
    return path.absolute()


def play_argv(
    run: IsaacLabRun, checkpoint: Path, *, num_envs: int | None = None, device: str | None = None,
    video: bool = False, video_length: int | None = None,
) -> list[str]:  # fmt: skip
    """Isaac Lab's play of ``checkpoint`` (see the module docstring), with the run's interpreter."""
    isaaclab3 = is_isaaclab3_entry(run.script)
    program = list(PLAY_COMMAND_3) if isaaclab3 else [str(Path(run.script).with_name(PLAY_SCRIPT))]
    kept = _kept(run.args)
    for option, value in (("--num_envs", num_envs), ("--device", device), ("--video_length", video_length)):
        if value is not None:
            kept = [*without_options(kept, (option,)), option, str(value)]
    return [run.python, *program, *kept, *(["--video"] if video else []), "--checkpoint", str(checkpoint)]


def _kept(args: Sequence[str]) -> list[str]:
    """The training arguments that shape the environment and the agent the same way in play."""
    kept: list[str] = []
    for index, arg in enumerate(args):
        name = arg.partition("=")[0]
        if arg in KEPT_OPTIONS and index + 1 < len(args):
            kept += [arg, args[index + 1]]
        elif (name in KEPT_OPTIONS and "=" in arg) or arg in KEPT_FLAGS:
            kept.append(arg)
        elif not arg.startswith("-") and "=" in arg and (index == 0 or args[index - 1] not in KEPT_OPTIONS):
            kept.append(arg)  # a Hydra override (env.*, agent.*, physics=, presets=)
    return kept


def play_environment(run: IsaacLabRun, device: str) -> dict[str, str]:
    """This process's environment without the rank variables of a job it may run in, the library's
    fixes, the run's own ``env`` on top."""
    return {**job_free_environment(dict(os.environ), run.library, run.ml_framework, device), **run.env}


def run_play(command: Sequence[str], env: Mapping[str, str], *, seconds: float | None = None,
             done: Callable[[], bool] | None = None) -> tuple[int, bool]:  # fmt: skip
    """Run Isaac Lab's play, its output passed through; stop it with SIGINT ``seconds`` after it
    started playing (:data:`PLAYING_3` / :data:`PLAYING_2`: its start-up, tens of seconds with a
    simulator, does not count) or once ``done()``. Returns its exit status (0 when it ended cleanly
    after our SIGINT) and whether we stopped it."""
    mark = PLAYING_3 if list(command[1:4]) == list(PLAY_COMMAND_3) else PLAYING_2
    process = subprocess.Popen(list(command), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    playing = threading.Event()
    pumps = [threading.Thread(target=_pump, args=(pipe, sink, mark, playing), daemon=True)
             for pipe, sink in ((process.stdout, sys.stdout), (process.stderr, sys.stderr))]  # fmt: skip
    for pump in pumps:
        pump.start()
    started, playing_since = time.monotonic(), None
    stopped = False
    try:
        while process.poll() is None:
            if playing.is_set() and playing_since is None:
                playing_since = time.monotonic()
            late = seconds is not None and time.monotonic() - started >= seconds + STARTUP_LIMIT_S
            played = seconds is not None and playing_since is not None and time.monotonic() - playing_since >= seconds
            if played or late or (done is not None and done()):
                stopped = True
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    print(f"islab-train: Isaac Lab's play did not end within {STOP_GRACE_S:g} s of SIGINT: killed it",
                          file=sys.stderr)  # fmt: skip
                    process.kill()
                    process.wait()
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # Ctrl-C reached both of us: it stops by itself
        process.wait()
        return 130, False
    finally:
        for pump in pumps:
            pump.join(timeout=5)
    status = process.returncode
    if stopped and playing_since is not None:
        # It played as long as asked (or did what was asked): how it then ends under our SIGINT --
        # cleanly, by the signal, or with its own status from a cleanup interrupted -- is not a failure.
        if status not in (0, -signal.SIGINT, 128 + signal.SIGINT):
            print(f"islab-train: Isaac Lab's play ended with status {status} after islab-train stopped it",
                  file=sys.stderr)  # fmt: skip
        return 0, True
    return (128 - status if status < 0 else status) or int(stopped), stopped


def _pump(pipe: IO[bytes], sink: IO[str], mark: str, playing: threading.Event) -> None:
    for raw in iter(pipe.readline, b""):
        line = raw.decode(errors="replace")
        if mark in line:
            playing.set()
        sink.write(line)
        sink.flush()


def exported_done(folder: Path, since: float) -> Callable[[], bool]:
    """True once every file of :data:`EXPORTED` in ``folder`` was written after ``since`` (epoch s) and
    kept its size between two calls (written to its end)."""
    sizes: dict[str, int] = {}

    def done() -> bool:
        now = {}
        for name in EXPORTED:
            try:
                stat = (folder / name).stat()
            except OSError:
                return False
            if stat.st_mtime < since:
                return False
            now[name] = stat.st_size
        ready = now == sizes and all(now.values())
        sizes.update(now)
        return ready

    return done


def play_command(
    run: IsaacLabRun, *, checkpoint: str = "latest", num_envs: int | None = None, device: str | None = None,
    video: bool = False, video_length: int | None = None, seconds: float | None = None,
) -> int:  # fmt: skip
    """``islab-train play RUN`` of a run of Isaac Lab's trainer: exit status (2: bad input, nothing ran)."""
    try:
        for option, value in (("--num-envs", num_envs), ("--video-length", video_length), ("--seconds", seconds)):
            if value is not None and value <= 0:
                raise SpecError(Issue(option, f"must be positive, got {value}", f"Give e.g. {option} 10"))
        path = chosen_checkpoint(run, checkpoint)
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    command = play_argv(run, path, num_envs=num_envs, device=device, video=video, video_length=video_length)
    print(f"islab-train: Isaac Lab's play of {path}: {shlex.join(command)}", file=sys.stderr)
    status, stopped = run_play(command, play_environment(run, device or "cpu"), seconds=seconds)
    if stopped and status == 0:
        print(f"islab-train: stopped Isaac Lab's play after {seconds:g} s", file=sys.stderr)
    return status


def export_command(run: IsaacLabRun, *, checkpoint: str = "latest") -> int:
    """``islab-train export RUN`` of a run of Isaac Lab's trainer: its rsl_rl play's exports."""
    try:
        if run.library not in EXPORTS:
            raise SpecError(Issue("RUN_DIR", f"Isaac Lab's {run.library} play exports no policy (only its "
                                  f"{', '.join(EXPORTS)} play writes {EXPORT_DIR}/)", "Play it with islab-train play "
                                  "RUN_DIR; to export, train with islab's worker (islab-train export then writes "
                                  "TorchScript and ONNX) or with rsl_rl"))  # fmt: skip
        path = chosen_checkpoint(run, checkpoint)
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    folder = path.parent / EXPORT_DIR
    command = play_argv(run, path)
    print(f"islab-train: Isaac Lab's play of {path}, until it has exported: {shlex.join(command)}", file=sys.stderr)
    status, stopped = run_play(command, play_environment(run, "cpu"), done=exported_done(folder, time.time() - 1))
    if not stopped:
        print(f"error: export: Isaac Lab's play ended (exit {status}) before it wrote {folder}/"
              f"{' and '.join(EXPORTED)}. See its output above", file=sys.stderr)  # fmt: skip
        return status or 1
    if status == 0:
        print(f"islab-train: exported {', '.join(str(folder / name) for name in EXPORTED)} (Isaac Lab's rsl_rl "
              "play: raw observations -> actions, its normalizer folded in)")  # fmt: skip
    return status
