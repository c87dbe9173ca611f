"""Which run, which checkpoint (torch-free): the first thing ``play`` and ``export`` decide.

``RUN_DIR`` must be a run directory a training wrote (``spec.yaml`` + ``agent.yaml`` + islab
checkpoints). ``--checkpoint`` picks one of its islab checkpoints:

* ``latest`` (default): ``checkpoints/latest.pt``, what ``--resume RUN_DIR`` would continue from;
* ``best``: the best checkpoint of the last ``islab-train eval`` (``eval.json``: the highest mean
  return of the deterministic policy) while that file is still kept; without an evaluation, of the
  islab checkpoints still on disk (``checkpoints/iter_<N>.pt``, the newest few are kept), the one
  whose iteration has the highest mean episode return in ``progress.jsonl`` -- the training's own
  figure (stochastic actions, a window of recent episodes), not a fresh evaluation; when no kept
  checkpoint has a recorded return, ``best`` falls back to ``latest`` and says so;
* a path to an islab checkpoint file (``iter_<N>.pt`` of this or another run of the same library
  and task; the loader checks it).

Anything else is refused here, before torch or a library is imported: one line
``error: <field>: <problem>. <fix>.`` and exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab import rundir
from islab.spec.issues import Issue, SpecError

CHECKPOINT_CHOICES = rundir.CHECKPOINT_CHOICES  # what latest, best and a path mean: rundir.chosen_checkpoint


@dataclass(frozen=True)
class PolicySource:
    """A resolved ``RUN_DIR [--checkpoint X]``: the run's stored spec and one checkpoint file."""

    run_dir: Path
    checkpoint: Path
    choice: str  # "latest", "best" or "path"
    note: str | None  # why this file, when that is not obvious (best's fallback)
    spec: dict[str, Any]

    @property
    def lib(self) -> str:
        return str(self.spec["lib"])

    @property
    def ml_framework(self) -> str:
        return str(self.spec.get("ml_framework") or "torch")

    @property
    def task(self) -> str:
        return str(self.spec["task"])


def read_run_spec(run_dir: Path) -> dict[str, Any]:
    """``spec.yaml`` as a dict; SpecError when the directory is not a run directory."""
    import yaml

    if not run_dir.exists():
        raise SpecError(Issue("RUN_DIR", f"{run_dir} does not exist", "Pass the run directory a training printed"))
    if not run_dir.is_dir():
        raise SpecError(Issue("RUN_DIR", f"{run_dir} is a file, not a run directory", "Pass its run directory"))
    spec_file = run_dir / rundir.SPEC_FILE
    if not spec_file.is_file() or not (run_dir / rundir.AGENT_FILE).is_file():
        raise SpecError(
            Issue(
                "RUN_DIR",
                f"{run_dir} has no {rundir.SPEC_FILE} and {rundir.AGENT_FILE}, so it is not a run directory "
                "(or its training never started)",
                "Pass <log_dir>/<lib>/<task>/<time>, the directory islab-train printed",
            )
        )
    try:
        spec = yaml.safe_load(spec_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise SpecError(Issue("RUN_DIR", f"cannot read {spec_file}: {error}", "Check the file")) from error
    if not isinstance(spec, dict) or not spec.get("lib") or not spec.get("task"):
        raise SpecError(Issue("RUN_DIR", f"{spec_file} names no lib and task", "Pass a run directory islab wrote"))
    return spec


def resolve_source(run_dir: str | Path, checkpoint: str = "latest") -> PolicySource:
    """Check ``RUN_DIR`` and ``--checkpoint``; SpecError (exit 2) for anything unusable."""
    directory = Path(run_dir).expanduser()
    spec = read_run_spec(directory)
    path, choice, note = rundir.chosen_checkpoint(directory, checkpoint)
    if choice == "path" and not path.is_file():
        raise SpecError(
            Issue(
                "--checkpoint",
                f"{checkpoint!r} is neither {' nor '.join(CHECKPOINT_CHOICES)} nor an existing file",
                f"Use latest, best or a path such as {rundir.history_checkpoint(directory, '<N>')}",
            )
        )
    if not path.is_file():
        # Not `--resume RUN_DIR`: with no checkpoint there is nothing to resume from (it is refused).
        again = train_again_command(directory)
        raise SpecError(
            Issue(
                "--checkpoint",
                f"{directory} has no islab checkpoint {path.name}: its training stopped (or is still running) "
                f"before the first one, which comes after {spec.get('checkpoint_interval', '?')} iteration(s)",
                (f"Train it again with the options it was started with (a new run directory; --checkpoint-interval "
                 f"N saves every N iterations): {again}" if again else "Train it again")
                + ", or pass a checkpoint file",
            )
        )  # fmt: skip
    return PolicySource(run_dir=directory, checkpoint=path, choice=choice, note=note, spec=spec)


def train_again_command(run_dir: Path) -> str | None:
    """The ``islab-train`` command that trains ``run_dir``'s run again from the start, with the options
    it was launched with (its ``launch.yaml``, as ``--resume`` reads it:
    :func:`islab.resolve.resumed.stored_layer`), shell-quoted; None without a readable record. Values
    of its cluster file's ``env:`` have no option and are not repeated."""
    from islab.plan.dry_run import shell_line
    from islab.resolve.resumed import stored_layer
    from islab.sweep.trials import run_options

    stored = {name: value for name, (value, _) in stored_layer(run_dir).items()}
    if not stored:
        return None
    try:
        options = run_options(stored, None)
    except KeyError:  # a field of a newer or older islab-train without an option here
        return None
    args = [str(arg) for arg in stored.get("args") or ()]
    overrides = [str(item) for item in stored.get("overrides") or ()]
    return shell_line(["islab-train", *options, *overrides, *(["--", *args] if args else [])], {})
