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
    summary.json             rank 0's end-of-run numbers (the launcher's summary table)
    curves.png               mean return and steps/s per iteration (the launcher draws it)
    eval.json                the last ``islab-train play``: episode return/length statistics
    exported/policy.pt       ``islab-train export``: TorchScript policy (normalizer folded in)
    exported/policy.onnx     the same policy as ONNX
    exported/policy.json     its inputs, outputs, action scaling, library, checkpoint

The launcher reads what the ranks write (progress, summary, logs) and the ranks read what an
earlier run wrote (checkpoints, progress after an elastic restart), so both sides import the
names from here. A progress record is
``{"iteration", "max_iterations", "env_steps", "steps_per_s", "mean_return", "time_s"}``.
"""

from __future__ import annotations

import json
import os
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
DIGESTS_DIR = "digests"
SUMMARY_FILE = "summary.json"
CURVES_FILE = "curves.png"
EVAL_FILE = "eval.json"
EXPORT_DIR = "exported"


# -- paths ---------------------------------------------------------------------------------------


def logs_dir(run_dir: str | Path) -> Path:
    return Path(run_dir, LOGS_DIR)


def rank_log(run_dir: str | Path, rank: int) -> Path:
    """``logs/rank_<R>.log``: everything rank ``rank`` printed."""
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


def resume_source(path: str | Path) -> Path:
    """``--resume`` takes a run directory (its ``checkpoints/latest.pt``) or a checkpoint file."""
    path = Path(path)
    return latest_checkpoint(path) if path.is_dir() else path


def digest_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir, DIGESTS_DIR, f"rank_{rank}.json")


def summary_path(run_dir: str | Path) -> Path:
    return Path(run_dir, SUMMARY_FILE)


def curves_path(run_dir: str | Path) -> Path:
    return Path(run_dir, CURVES_FILE)


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

