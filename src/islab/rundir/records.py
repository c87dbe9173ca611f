"""The records a run leaves besides progress: ``launch.yaml``, ``spec.yaml``/``agent.yaml``, the
ranks' policy digests, ``summary.json``, the heartbeats of the hang watch, the wandb run id; all
written atomically (temporary file + rename) so a reader never sees half a file (torch-free).
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

from islab.rundir.layout import (
    AGENT_FILE,
    DIGESTS_DIR,
    HEARTBEATS_DIR,
    LAUNCH_FILE,
    SPEC_FILE,
    WANDB_RUN_ID_FILE,
    digest_path,
    heartbeat_path,
    preflight_path,
    summary_path,
)


def write_text_atomic(path: Path, text: str) -> Path:
    """Write through a temporary file and a rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_figure_atomic(figure: Any, path: str | Path, dpi: int = 100) -> Path:
    """Save a matplotlib ``figure`` as PNG through a temporary file and a rename, then close it: a
    viewer refreshing ``curves.png`` never reads half an image."""
    import matplotlib.pyplot as plt  # lazy: only the plots need matplotlib

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")  # the suffix tells matplotlib the format
    figure.savefig(tmp, dpi=dpi)
    plt.close(figure)
    tmp.replace(path)
    return path


def read_lines(path: Path) -> list[str]:
    """A text file's lines (a rank's log, a child's output); [] when it cannot be read, undecodable
    bytes replaced: logs are read while being written, by someone else's process."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


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


def read_run_spec(run_dir: str | Path) -> dict[str, Any] | None:
    """``spec.yaml`` as rank 0 wrote it at the start of the latest launch; None when it is missing or
    not a YAML mapping."""
    import yaml

    try:
        data = yaml.safe_load(Path(run_dir, SPEC_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


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
        record = read_json_object(path)
        fields = (("rank", int), ("policy_sha256", str), ("world_size", int))
        if record is not None and all(isinstance(record.get(key), kind) for key, kind in fields):
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


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object file; None when it is missing, not JSON or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """Rank 0's ``summary.json``; None when it is missing or not JSON (a run that failed early)."""
    return read_json_object(summary_path(run_dir))


def read_preflight(run_dir: str | Path) -> dict[str, Any] | None:
    """``preflight.json``; None when it is missing or not JSON."""
    return read_json_object(preflight_path(run_dir))


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
        record = read_json_object(path)
        fields = ("rank", "pid", "iteration", "done")
        if record is not None and all(isinstance(record.get(name), int) for name in fields):
            found[record["rank"]] = record
    return found
