"""What a path a user gives means: ``--resume RUN_DIR | FILE`` (and whether that run already
reached its target) and play/export's ``--checkpoint latest | best | PATH`` (torch-free); ``best``
is best by ``islab-train eval`` when the run was evaluated. The one
place these are decided: the resolver, the planner, the launcher, the worker and
``play``/``export`` all ask here.
"""

from __future__ import annotations

import json
from pathlib import Path

from islab.rundir.layout import (
    CHECKPOINTS_DIR,
    LATEST_CHECKPOINT,
    LAUNCH_FILE,
    SPEC_FILE,
    eval_path,
    history_checkpoints,
    latest_checkpoint,
    progress_path,
    summary_path,
)
from islab.rundir.progress import read_progress
from islab.rundir.records import read_run_spec, read_summary

RESUME_FORMS = f"a checkpoint file nor a run directory with {CHECKPOINTS_DIR}/{LATEST_CHECKPOINT}"  # for messages


def resume_source(path: str | Path) -> Path:
    """``--resume`` takes a run directory (its ``checkpoints/latest.pt``) or a checkpoint file."""
    path = Path(path)
    return latest_checkpoint(path) if path.is_dir() else path


def continued_run_dir(resume: str | None) -> str | None:
    """The run directory a ``--resume`` continues in: the one given (a new one for a file)."""
    return resume if resume is not None and Path(resume).is_dir() else None


def run_dir_of(resume: str) -> Path | None:
    """The run directory behind a ``--resume`` value: the directory itself, or the run holding a
    ``checkpoints/<file>.pt``; None when there is no launch record to continue from."""
    path = Path(resume)
    for candidate in (path, path.parent.parent):
        if (candidate / LAUNCH_FILE).is_file():
            return candidate
    return None


def reached_target(run_dir: str | Path) -> tuple[int, int] | None:
    """(iteration, target) when the run's last launch trained to its target and ended there:
    ``summary.json`` (not a preemption's) at the ``target_iteration`` of ``spec.yaml``, and nothing
    written since (no newer checkpoint, no later launch's ``spec.yaml``). ``--resume RUN_DIR``
    alone would have nothing to train. None otherwise, or when the records cannot be read."""
    summary, spec = read_summary(run_dir), read_run_spec(run_dir)
    if summary is None or spec is None or "preempted" in summary:
        return None
    iteration, target = summary.get("iteration"), spec.get("target_iteration")
    if not isinstance(iteration, int) or not isinstance(target, int) or iteration < target:
        return None
    try:
        ended = summary_path(run_dir).stat().st_mtime
        since = [latest_checkpoint(run_dir), Path(run_dir, SPEC_FILE)]
        if any(path.exists() and path.stat().st_mtime > ended for path in since):
            return None
    except OSError:
        return None
    return iteration, target


def recorded_returns(run_dir: str | Path) -> dict[int, float]:
    """Mean return per iteration from ``progress.jsonl``; a repeated iteration (after an elastic
    restart redid it) keeps its last record, which is the one whose policy the checkpoint holds."""
    returns: dict[int, float] = {}
    for record in read_progress(progress_path(run_dir)):
        if record.get("mean_return") is not None and record.get("iteration") is not None:
            returns[int(record["iteration"])] = float(record["mean_return"])
    return returns


def evaluated_best(run_dir: str | Path) -> tuple[Path, str] | None:
    """The best checkpoint of the last ``islab-train eval`` (``eval.json``'s ``best``) and a note;
    None without an evaluation, when its best is no longer kept, or when that file was written
    after the evaluation (an elastic restart redid its iteration: the policy is another one)."""
    record = eval_path(run_dir)
    try:
        evaluation = json.loads(record.read_text(encoding="utf-8"))
        best = evaluation["best"]
        path = Path(run_dir, best["checkpoint"])
        if not path.is_file() or path.stat().st_mtime > record.stat().st_mtime:
            return None
        note = (f"iteration {best['iteration']}, mean return {float(best['mean_return']):.2f} over "
                f"{evaluation['episodes']} episodes in islab-train eval")  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):  # no evaluation, or not one we can read
        return None
    return path, note


def best_checkpoint(run_dir: str | Path) -> tuple[Path, str | None]:
    """``best``: (the checkpoint, a note). By evaluation when ``islab-train eval`` evaluated the
    run (:func:`evaluated_best`), else the kept checkpoint with the highest mean return recorded
    during training."""
    evaluated = evaluated_best(run_dir)
    if evaluated is not None:
        return evaluated
    returns = recorded_returns(run_dir)
    scored = [(returns[it], it, path) for it, path in history_checkpoints(run_dir).items() if it in returns]
    if not scored:
        return latest_checkpoint(run_dir), "no kept checkpoint has a recorded mean return; using latest"
    mean_return, iteration, path = max(scored)  # equal returns: the later iteration
    return path, f"iteration {iteration}, mean return {mean_return:.2f} during training"


def chosen_checkpoint(run_dir: Path, checkpoint: str) -> tuple[Path, str, str | None]:
    """``--checkpoint latest|best|PATH`` of a run -> (file, "latest"/"best"/"path", note or None).
    The file may not exist; the caller says what is wrong."""
    if checkpoint == "latest":
        return latest_checkpoint(run_dir), "latest", None
    if checkpoint == "best":
        path, note = best_checkpoint(run_dir)
        return path, "best", note
    return Path(checkpoint).expanduser(), "path", None
