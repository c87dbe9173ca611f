"""``--resume RUN_DIR`` of a run of Isaac Lab's trainer: its own command again, from its newest
checkpoint, through Isaac Lab's own options for starting from one.

The run's ``launch.yaml`` holds the command its ranks ran (the preset's entry point and arguments);
its ``trainer_runs.jsonl`` the run folders Isaac Lab made (:mod:`islab.rundir.trainer_runs`), whose
newest complete checkpoint the run goes on from. Isaac Lab's options for that, read from its sources:

* Isaac Lab 3 (the unified trainer, ``--rl_library L``; ``isaaclab_rl/entrypoints/backends/
  train_<lib>.py``): ``--checkpoint PATH`` for every library, a file loaded as it is;
* Isaac Lab 2.x's ``rsl_rl/train.py`` (with its ``cli_args.py``): ``--resume --load_run RUN
  --checkpoint FILE``, regular expressions that ``isaaclab_tasks.utils.get_checkpoint_path``
  ``re.match``-es against the folders of ``./logs/rsl_rl/<experiment>`` under the working directory
  and the files of the folder chosen (written here escaped and anchored: exactly that folder and
  file), so the resume must start where the run started;
* Isaac Lab 2.x's ``rl_games/train.py`` and ``skrl/train.py``: ``--checkpoint PATH``.

Isaac Lab starts a new run folder all the same (a resumed run is a new run of Isaac Lab's, in the
same islab run directory). What the iterations mean after a resume is each library's own:
rsl_rl's runner restores its iteration and trains ``--max_iterations`` more; rl_games restores its
epoch and stops at ``max_epochs``, a count from the run's start; Isaac Lab's skrl train.py loads the
agent's models only, and its trainer counts its timesteps from 0 again. islab's ``--resume`` keeps
its own rule where the checkpoint allows it: alone, it finishes the run's target (rsl_rl: the
iterations left; rl_games: the same ``--max_iterations``); with ``--max-iterations M``, M more (rl_games:
the checkpoint's epoch + M). skrl trains ``--max_iterations`` (or M) again: its checkpoint names a
timestep, not an iteration.

Pure functions of the stored arguments and the checkpoint; the resolution edge reads the disk.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from islab import rundir
from islab.resolve.layers import Source
from islab.resolve.messages import label_of
from islab.rundir.trainer_runs import TrainerCheckpoint, trainer_runs_path
from islab.spec.issues import Issue, SpecError

UNIFIED_SELECTOR = "--rl_library"  # Isaac Lab 3's trainer (and the unified train.py) takes it; 2.x's scripts do not
RUN_TIMESTAMP = "--run_timestamp"  # Isaac Lab 3: the launch names its run folder; a resume is a new launch
VALUED = ("--load_run", "--checkpoint", RUN_TIMESTAMP)
FLAGS = ("--resume",)


class ResumeProblem(ValueError):
    """``<problem>. <fix>`` of a resume that cannot be planned."""


def option_value(args: Sequence[str], option: str) -> str | None:
    """The last value of ``option`` (``--opt V`` or ``--opt=V``): argparse keeps the last."""
    found = None
    for index, arg in enumerate(args):
        if arg == option and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(f"{option}="):
            found = arg.partition("=")[2]
    return found


def without_options(args: Sequence[str], valued: Sequence[str], flags: Sequence[str] = ()) -> list[str]:
    """``args`` without every ``--opt V`` / ``--opt=V`` of ``valued`` and every flag of ``flags``."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in valued:
            skip = True
            continue
        if arg in flags or any(arg.startswith(f"{option}=") for option in valued):
            continue
        kept.append(arg)
    return kept


def target_of(args: Sequence[str], library: str) -> int | None:
    """The iteration a stored command trains up to, where it can be told: rsl_rl's
    ``--max_iterations`` more than the checkpoint it started from; rl_games' ``--max_iterations``
    (epochs from the run's start). None otherwise (skrl; no ``--max_iterations``)."""
    iterations = option_value(args, "--max_iterations")
    if iterations is None or not iterations.isdigit() or library not in ("rsl_rl", "rl_games"):
        return None
    if library == "rl_games":
        return int(iterations)
    started = re.search(r"model_(\d+)", option_value(args, "--checkpoint") or "")
    return int(iterations) + (int(started.group(1)) if started else 0)


def resumed_args(
    args: Sequence[str],
    library: str,
    checkpoint: TrainerCheckpoint,
    *,
    more_iterations: int | None,
    cwd: Path,
) -> tuple[str, ...]:
    """The stored command's arguments, continued from ``checkpoint`` (see the module docstring).
    ``more_iterations``: ``--max-iterations M`` given with ``--resume``. ResumeProblem when Isaac
    Lab could not start from it (2.x rsl_rl from another working directory) or nothing is left."""
    unified = UNIFIED_SELECTOR in args
    kept = without_options(args, VALUED, FLAGS)
    done = checkpoint.number or 0
    iterations = _iterations(args, library, done, more_iterations)
    if iterations is not None:
        kept = [*without_options(kept, ("--max_iterations",)), "--max_iterations", str(iterations)]
    if unified or library != "rsl_rl":
        return (*kept, "--checkpoint", str(checkpoint.path))
    experiment_root = checkpoint.folder.parent
    if experiment_root.parent != cwd / "logs" / "rsl_rl":
        raise ResumeProblem(
            f"Isaac Lab 2.x's rsl_rl train.py looks for the checkpoint under ./logs/rsl_rl/<experiment> of its "
            f"working directory, and {checkpoint.path} is not under {cwd}. Run islab-train --resume from "
            f"{experiment_root.parent.parent.parent}, where the run started"
        )
    load_run, file = re.escape(checkpoint.folder.name) + "$", re.escape(checkpoint.path.name) + "$"
    return (*kept, "--resume", "--load_run", load_run, "--checkpoint", file)


def _iterations(args: Sequence[str], library: str, done: int, more: int | None) -> int | None:
    """The ``--max_iterations`` a resume from iteration ``done`` passes (None: the stored one)."""
    if more is not None:
        return done + more if library == "rl_games" else more
    target = target_of(args, library)
    if target is not None and target <= done:
        raise ResumeProblem(
            f"the run has reached its {target} iterations (its newest checkpoint is iteration {done}). "
            "Give --max-iterations M with --resume to train M more"
        )
    return target - done if target is not None and library == "rsl_rl" else None


def apply_isaaclab_resume(
    merged: dict[str, Any], sources: dict[str, Source], origins: dict[str, str], *, edge: Any
) -> None:
    """``--resume RUN_DIR`` of an Isaac Lab run, on the merged layers (its stored entry point and
    arguments came back from its ``launch.yaml``): the arguments continued from the run's newest
    checkpoint (:func:`resumed_args`). What a checkpoint's state is shaped by (task, number of
    environments) and the stored arguments cannot be given anew; ``--max-iterations``, ``--seed``
    and ``KEY=VALUE`` overrides can. ``edge``: where the checkpoint and the working directory are read."""
    label = origins.get("resume", "--resume")
    run_dir = rundir.continued_run_dir(str(merged["resume"]))
    if run_dir is None:
        fix = "Resume a run of Isaac Lab's trainer by its run directory (islab-train printed it)"
        raise SpecError(Issue(label, f"{merged['resume']} is not a run directory", fix))
    for name in ("task", "num_envs", "args"):
        if sources.get(name) not in (None, Source.RESUMED, Source.DEFAULT):
            raise SpecError(Issue(
                label_of(name, origins),
                f"a resumed run of Isaac Lab's trainer keeps its {'arguments' if name == 'args' else name}: it "
                f"re-runs the command its {rundir.LAUNCH_FILE} holds, from the newest checkpoint",
                "Drop it to go on with the run, or start a new run without --resume",
            ))  # fmt: skip
        if sources.get(name) == Source.RESUMED and name != "args":
            del merged[name]  # the stored spec's field, which the preset consumed: its default now
    library = str(merged.get("lib", "rsl_rl"))
    checkpoint = edge.trainer_checkpoint(Path(run_dir), library)
    if checkpoint is None:
        raise SpecError(Issue(
            label, f"{run_dir} holds no complete checkpoint of Isaac Lab's {library} trainer yet (its run "
            f"folders are listed in {trainer_runs_path(run_dir)})", "Start the run again without --resume",
        ))  # fmt: skip
    given_now = sources.get("max_iterations") in (Source.CLI, Source.ENV, Source.FILE)
    more = merged.pop("max_iterations", None) if given_now else merged.pop("max_iterations", None) and None
    args = list(merged.get("args") or ())
    if sources.get("seed") in (Source.CLI, Source.ENV, Source.FILE):
        args = [*without_options(args, ("--seed",)), "--seed", str(merged["seed"])]
    args += [str(item) for item in merged.pop("overrides", None) or ()]  # Hydra overrides, 2.x and 3.x alike
    try:
        merged["args"] = resumed_args(args, library, checkpoint, more_iterations=more, cwd=edge.working_directory())
    except ResumeProblem as problem:
        text, _, fix = str(problem).partition(". ")
        raise SpecError(Issue(label, text, fix)) from None
