"""The run directory: the one place that names its files (torch-free).

Every run writes into one directory, chosen by the launcher (``<log_dir>/<run_name>``)::

    launch.yaml              the resolved spec and where each value came from (launcher, node 0)
    spec.yaml                the worker's arguments, world size, start/target iteration (rank 0)
    agent.yaml               the agent config after the user's key=value overrides (rank 0)
    logs/rank_<R>.log        everything rank R printed (each rank tees its own)
    progress.jsonl           one JSON object per training iteration (rank 0 appends)
    checkpoints/latest.pt    the newest islab checkpoint (``--resume RUN_DIR`` reads it)
    checkpoints/iter_<N>.pt  older islab checkpoints
    digests/rank_<R>.json    the sha256 of rank R's policy at the end and the world size (all
                             ranks must agree: the launcher compares them, read_digests)
    heartbeats/rank_<R>.json rank R's liveness: its pid and the last iteration it finished (rewritten
                             every iteration; the launcher's hang watch reads them)
    summary.json             rank 0's end-of-run numbers (the launcher's summary table)
    curves.png               mean return and steps/s per iteration (the launcher draws it)
    wandb_run_id             ``--logger wandb``: the Weights & Biases run id of this run directory
    wandb/                   wandb's own files (offline runs: wandb/offline-run-*/run-<id>.wandb)
    eval.json                the last ``islab-train play``: episode return/length statistics
    exported/policy.pt       ``islab-train export``: TorchScript policy (normalizer folded in)
    exported/policy.onnx     the same policy as ONNX
    exported/policy.json     its inputs, outputs, action scaling, library, checkpoint

The launcher reads what the ranks write (progress, summary, logs) and the ranks read what an
earlier run wrote (checkpoints, progress after an elastic restart), so both sides import the
names from here. A progress record is
``{"iteration", "max_iterations", "env_steps", "steps_per_s", "mean_return", "time_s", "job_env_steps"}``
(``env_steps``: all ranks, since this job started; ``job_env_steps``: since the run began, across
resumes) plus ``"losses": {name: value}`` where the library gives them cheaply.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LAUNCH_FILE = "launch.yaml"
SPEC_FILE = "spec.yaml"
AGENT_FILE = "agent.yaml"
LOGS_DIR = "logs"
PROGRESS_FILE = "progress.jsonl"
CHECKPOINTS_DIR = "checkpoints"
LATEST_CHECKPOINT = "latest.pt"
HISTORY_PREFIX = "iter_"  # checkpoints/iter_<N>.pt
CHECKPOINT_CHOICES = ("latest", "best")  # play/export --checkpoint, besides a path
DIGESTS_DIR = "digests"
HEARTBEATS_DIR = "heartbeats"
SUMMARY_FILE = "summary.json"
CURVES_FILE = "curves.png"
EVAL_FILE = "eval.json"
EXPORT_DIR = "exported"
WANDB_RUN_ID_FILE = "wandb_run_id"
PREFLIGHT_FILE = "preflight.json"
PREFLIGHT_DIR = "preflight"  # the probe's rank logs (NCCL_DEBUG=INFO output)


# -- paths ---------------------------------------------------------------------------------------


def logs_dir(run_dir: str | Path) -> Path:
    return Path(run_dir, LOGS_DIR)


def rank_log(run_dir: str | Path, rank: int | str) -> Path:
    """``logs/rank_<R>.log``: everything rank ``rank`` printed (``"<R>"`` in help texts)."""
    return logs_dir(run_dir) / f"rank_{rank}.log"


def rank_logs(run_dir: str | Path) -> list[Path]:
    """The rank logs that exist, sorted by name."""
    return sorted(logs_dir(run_dir).glob("rank_*.log"))


def progress_path(run_dir: str | Path) -> Path:
    return Path(run_dir, PROGRESS_FILE)


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir, CHECKPOINTS_DIR)


def latest_checkpoint(run_dir: str | Path) -> Path:
    return checkpoint_dir(run_dir) / LATEST_CHECKPOINT


def history_checkpoint(run_dir: str | Path, iteration: int | str) -> Path:
    """``checkpoints/iter_<N>.pt`` (``iteration`` may be text, e.g. ``"<N>"`` in a message)."""
    return checkpoint_dir(run_dir) / f"{HISTORY_PREFIX}{iteration}.pt"


def history_checkpoints(run_dir: str | Path) -> dict[int, Path]:
    """The ``checkpoints/iter_<N>.pt`` on disk, by iteration N, in order."""
    found: dict[int, Path] = {}
    for path in checkpoint_dir(run_dir).glob(f"{HISTORY_PREFIX}*.pt"):
        number = path.stem.removeprefix(HISTORY_PREFIX)
        if number.isdigit():
            found[int(number)] = path
    return dict(sorted(found.items()))


# -- what a path given by a user means: --resume RUN_DIR|FILE, play/export --checkpoint latest|best|PATH

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


def recorded_returns(run_dir: str | Path) -> dict[int, float]:
    """Mean return per iteration from ``progress.jsonl``; a repeated iteration (after an elastic
    restart redid it) keeps its last record, which is the one whose policy the checkpoint holds."""
    returns: dict[int, float] = {}
    for record in read_progress(progress_path(run_dir)):
        if record.get("mean_return") is not None and record.get("iteration") is not None:
            returns[int(record["iteration"])] = float(record["mean_return"])
    return returns


def best_checkpoint(run_dir: str | Path) -> tuple[Path, str | None]:
    """``best``: (the kept checkpoint with the highest recorded mean return, a note or None)."""
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


def digest_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir, DIGESTS_DIR, f"rank_{rank}.json")


def heartbeat_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir, HEARTBEATS_DIR, f"rank_{rank}.json")


def summary_path(run_dir: str | Path) -> Path:
    return Path(run_dir, SUMMARY_FILE)


def preflight_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / PREFLIGHT_FILE


def preflight_rank_log(run_dir: str | Path, rank: int | str) -> Path:
    """``preflight/rank_<R>.log``: what rank ``rank`` of the pre-flight probe printed (NCCL_DEBUG=INFO)."""
    return Path(run_dir, PREFLIGHT_DIR, f"rank_{rank}.log")


def read_preflight(run_dir: str | Path) -> dict[str, Any] | None:
    """``preflight.json``; None when it is missing or not JSON."""
    try:
        report = json.loads(preflight_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def flight_recorder_prefix(run_dir: str | Path) -> Path:
    """``logs/nccl_trace_rank_``: PyTorch's NCCL flight recorder appends the rank to this prefix
    (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) when a collective times out."""
    return logs_dir(run_dir) / "nccl_trace_rank_"


def curves_path(run_dir: str | Path) -> Path:
    return Path(run_dir, CURVES_FILE)


def wandb_run_id(run_dir: str | Path) -> str:
    """The run directory's Weights & Biases run id: read from ``wandb_run_id``, or derived from the
    directory's absolute path and stored there on first use, so every resume of this directory
    (wherever it has moved since) continues the same wandb run."""
    path = Path(run_dir, WANDB_RUN_ID_FILE)
    try:
        stored = path.read_text(encoding="utf-8").strip()
    except OSError:
        stored = ""
    if stored:
        return stored
    run_id = "islab-" + hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    write_text_atomic(path, run_id + "\n")
    return run_id


# -- writing ---------------------------------------------------------------------------------------


def write_text_atomic(path: Path, text: str) -> Path:
    """Write through a temporary file and a rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    import yaml  # lazy: the launcher's fast paths never write YAML

    return write_text_atomic(path, yaml.safe_dump(dict(data), sort_keys=False))


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    return write_text_atomic(path, json.dumps(dict(data), indent=2) + "\n")


def write_launch_record(run_dir: str | Path, record: Mapping[str, Any]) -> Path:
    """Create the run directory and write ``launch.yaml`` (the resolved spec and its sources)."""
    import yaml

    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    target = path / LAUNCH_FILE
    target.write_text(yaml.safe_dump(dict(record), sort_keys=False), encoding="utf-8")
    return target


def write_run_spec(run_dir: str | Path, spec: Mapping[str, Any], agent_cfg: Mapping[str, Any]) -> None:
    """Rank 0: ``spec.yaml`` and ``agent.yaml``."""
    write_yaml(Path(run_dir, SPEC_FILE), spec)
    write_yaml(Path(run_dir, AGENT_FILE), agent_cfg)


def write_digest(run_dir: str | Path, rank: int, policy_sha256: str, world_size: int) -> Path:
    record = {"rank": rank, "policy_sha256": policy_sha256, "world_size": world_size}
    return write_json(digest_path(run_dir, rank), record)


def read_digests(run_dir: str | Path) -> dict[int, str]:
    """``{rank: policy sha256}`` of the last run that wrote ``digests/``, as far as this node sees
    (all ranks on a shared file system, else this node's own).

    A run resumed in place with fewer ranks leaves the files of the ranks it no longer has; every
    rank of a run rewrites its own, so those left over are the ones recording a larger world size
    than the smallest present, and are not counted. Unreadable or foreign files are not either."""
    records = []
    for path in Path(run_dir, DIGESTS_DIR).glob("rank_*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        fields = (("rank", int), ("policy_sha256", str), ("world_size", int))
        if isinstance(record, dict) and all(isinstance(record.get(key), kind) for key, kind in fields):
            records.append(record)
    if not records:
        return {}
    world_size = min(record["world_size"] for record in records)
    return {r["rank"]: r["policy_sha256"] for r in records if r["world_size"] == world_size and r["rank"] < world_size}


def digest_divergence(digests: Mapping[int, str]) -> str | None:
    """None when every rank ended with the same policy; else which ranks hold which policy
    (sha256, 12 hex digits), grouped, the group of rank 0 first:
    ``"ranks 0, 2 have 1a2b3c4d5e6f, rank 1 has 9f8e7d6c5b4a"``."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(digests):
        groups.setdefault(digests[rank], []).append(rank)
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda item: item[1][0])  # by each group's lowest rank

    def who(ranks: list[int]) -> str:
        return f"rank {ranks[0]} has" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))} have"

    return ", ".join(f"{who(ranks)} {sha[:12]}" for sha, ranks in ordered)


# summary.json's keys for the two checkpoints a run ends with: ``checkpoint`` is the islab checkpoint
# (checkpoints/latest.pt or iter_<N>.pt, what --resume, play and export read, and what the summary
# table shows); ``library_checkpoint`` is the library's own file (rsl_rl's model_<N>.pt, ...).
SUMMARY_CHECKPOINT = "checkpoint"
SUMMARY_LIBRARY_CHECKPOINT = "library_checkpoint"


def write_summary(run_dir: str | Path, summary: Mapping[str, Any]) -> Path:
    return write_json(summary_path(run_dir), summary)


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """Rank 0's ``summary.json``; None when it is missing or not JSON (a run that failed early)."""
    try:
        summary = json.loads(summary_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


# -- progress.jsonl --------------------------------------------------------------------------------


class ProgressWriter:
    """Rank 0 appends one record per iteration; one line per write, so a reader sees whole lines
    or a torn last one (which :class:`ProgressReader` leaves for later)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = progress_path(run_dir)

    def append(self, record: Mapping[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(dict(record)) + "\n")


class ProgressReader:
    """Reads the records appended to ``progress.jsonl`` since the last call. A half-written last
    line is left for the next call; lines that are not JSON objects are skipped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        """The complete records appended since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        return [record for record in map(parse_record, lines) if record is not None]

    def drain(self) -> list[dict[str, Any]]:
        """:meth:`poll`, plus a last line without its newline if it parses (the writer is gone)."""
        records = self.poll()
        tail = parse_record(self._partial) if self._partial.strip() else None
        if tail is not None:
            self._partial = b""
            records.append(tail)
        return records


def parse_record(raw: bytes | str) -> dict[str, Any] | None:
    """One progress line as a dict, or None when it is not a record (torn, not JSON, no iteration)."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("iteration"), int) else None


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a ``progress.jsonl`` file (or of a run directory's), a torn line skipped."""
    path = Path(path)
    return ProgressReader(progress_path(path) if path.is_dir() else path).drain()


# -- heartbeats/rank_<R>.json ----------------------------------------------------------------------
#
# Every rank of our worker rewrites its heartbeat when training starts (``done`` 0) and after each
# iteration it finished completely (checkpoint and test hooks included). The launcher's hang watch
# (islab.run.hangs) reads them to see whether any rank still makes progress, which ranks are
# behind, and which pid to ask for its stacks: a rank registers faulthandler for
# STACK_DUMP_SIGNAL on its log, so the signal writes every Python thread's stack there.

STACK_DUMP_SIGNAL = signal.SIGUSR2  # SIGUSR1 is SLURM's preemption warning (sbatch --signal=B:USR1)


def write_heartbeat(run_dir: str | Path, rank: int, *, iteration: int, done: int) -> Path:
    """``iteration``: the last iteration finished, counted from the start of the run (across
    resumes); ``done``: iterations this process finished (0 until its first one: warm-up)."""
    record = {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "thread": threading.main_thread().ident,  # faulthandler's id of the main thread in a dump
        "iteration": iteration,
        "done": done,
        "time": time.time(),
    }
    return write_text_atomic(heartbeat_path(run_dir, rank), json.dumps(record) + "\n")


def read_heartbeats(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Every readable heartbeat, by rank (a file being replaced or not JSON is skipped)."""
    found: dict[int, dict[str, Any]] = {}
    for path in Path(run_dir, HEARTBEATS_DIR).glob("rank_*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        fields = ("rank", "pid", "iteration", "done")
        if isinstance(record, dict) and all(isinstance(record.get(name), int) for name in fields):
            found[record["rank"]] = record
    return found
