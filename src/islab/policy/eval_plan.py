"""What ``islab-train eval RUN`` evaluates, and with how many processes (pure, torch-free).

``--checkpoints`` picks among the checkpoints the run still keeps (``checkpoints/iter_<N>.pt``, the
newest ``--keep-checkpoints`` of the training; an older one was deleted and cannot be evaluated):

* ``all`` (default): every kept ``iter_<N>.pt``;
* ``latest``: the newest of them (the policy ``latest.pt`` holds);
* ``best``: the one ``play --checkpoint best`` plays now (best by the last evaluation, else by the
  return training recorded): evaluate it again, e.g. with more episodes;
* ``every:K``: the kept ones whose iteration is a multiple of K.

A run that kept no ``iter_<N>.pt`` (``--keep-checkpoints 0``) has only ``latest.pt``: ``all`` and
``latest`` evaluate that file.

The work is spread over processes, one checkpoint per process at a time (:mod:`islab.policy.evaluate`):
on the CPU ``--nproc N`` processes (default: one per core, at most one per checkpoint), each with
``cores / N`` threads; on GPUs one process per visible GPU, each seeing only its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from islab import rundir
from islab.spec.issues import Issue, SpecError

FORMS = ("all", "latest", "best", "every:K")
EVERY_PREFIX = "every:"


@dataclass(frozen=True, order=True)
class Candidate:
    """One checkpoint to evaluate: its iteration (None for a ``latest.pt`` without a kept
    ``iter_<N>.pt``: the evaluation reads it from the file) and its path."""

    iteration: int | None
    path: Path


def _bad_form(form: str) -> SpecError:
    return SpecError(
        Issue(
            "--checkpoints",
            f"{form!r} is not one of {', '.join(FORMS)}",
            "Use e.g. --checkpoints all, or --checkpoints every:10 for iterations 10, 20, ...",
        )
    )


def parse_form(form: str) -> tuple[str, int | None]:
    """``"every:10"`` -> ("every", 10); ``"all"`` -> ("all", None); SpecError for anything else."""
    if form in ("all", "latest", "best"):
        return form, None
    if not form.startswith(EVERY_PREFIX):
        raise _bad_form(form)
    step = form.removeprefix(EVERY_PREFIX)
    if not step.isdigit() or int(step) < 1:
        raise SpecError(
            Issue(
                "--checkpoints",
                f"{form!r}: K in every:K must be a whole number of iterations, at least 1",
                "Use e.g. --checkpoints every:10",
            )
        )
    return "every", int(step)


def select(form: str, kept: Mapping[int, Path], latest: Path | None, best: Path | None = None) -> list[Candidate]:
    """The checkpoints ``--checkpoints form`` names among ``kept`` (iteration -> ``iter_<N>.pt``),
    in iteration order. ``latest``: ``latest.pt`` when it exists; ``best``: the file ``play
    --checkpoint best`` would play. An empty list when the run kept nothing the form names."""
    kind, step = parse_form(form)
    history = [Candidate(iteration, path) for iteration, path in sorted(kept.items())]
    if not history:  # --keep-checkpoints 0: only latest.pt, whatever the form asks for
        return [Candidate(None, latest)] if latest is not None and kind in ("all", "latest", "best") else []
    if kind == "all":
        return history
    if kind == "latest":
        return history[-1:]
    if kind == "best":
        chosen = [candidate for candidate in history if best is not None and candidate.path == best]
        return chosen or history[-1:]  # best fell back to latest.pt, the newest kept one
    return [candidate for candidate in history if candidate.iteration is not None and candidate.iteration % step == 0]


def nothing_to_evaluate(form: str, kept: Sequence[int]) -> SpecError:
    """``every:K`` matched none of the kept iterations."""
    listed = ", ".join(str(iteration) for iteration in kept)
    return SpecError(
        Issue(
            "--checkpoints",
            f"{form!r} names none of the kept checkpoints (iterations {listed})",
            "Use --checkpoints all, a K that divides one of them, or train with --keep-checkpoints N "
            "and --checkpoint-interval K to keep more",
        )
    )


def process_count(requested: int | None, checkpoints: int, device: str, cores: int, gpus: int) -> int:
    """How many evaluation processes: ``requested`` (``--nproc``) or one per core (CPU) / visible
    GPU, never more than there are checkpoints. SpecError when the device has none to give."""
    if requested is not None and requested < 1:
        raise SpecError(Issue("--nproc", f"must be at least 1, got {requested}", "Give e.g. --nproc 2"))
    if device == "cuda":
        if gpus < 1:
            raise SpecError(Issue("--device", "cuda: no GPU is visible here", "Use --device cpu"))
        if requested is not None and requested > gpus:
            raise SpecError(
                Issue(
                    "--nproc",
                    f"{requested} processes, but {gpus} GPU(s) are visible: one process per GPU",
                    f"Give --nproc {gpus} or fewer",
                )
            )
        available = gpus
    else:
        available = max(1, cores)
    return max(1, min(requested or available, checkpoints))


def threads_per_process(cores: int, processes: int) -> int:
    """Each CPU process gets its share of the cores (oversubscribing them costs more than it gains)."""
    return max(1, cores // processes)


def visible_gpu_ids(cuda_visible_devices: str | None, count: int) -> list[str]:
    """The ids to put in each GPU process's ``CUDA_VISIBLE_DEVICES``: the entries the user made
    visible, in order, else ``0 .. count-1``."""
    if cuda_visible_devices and cuda_visible_devices.strip():
        return [entry.strip() for entry in cuda_visible_devices.split(",") if entry.strip()][:count]
    return [str(index) for index in range(count)]


def kept_checkpoints(run_dir: Path) -> tuple[dict[int, Path], Path | None]:
    """The run's ``iter_<N>.pt`` by iteration, and ``latest.pt`` when it exists."""
    latest = rundir.latest_checkpoint(run_dir)
    return rundir.history_checkpoints(run_dir), latest if latest.is_file() else None
