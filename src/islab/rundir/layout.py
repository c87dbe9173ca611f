"""The run directory's layout: every file and folder name, and the path of each (torch-free).

Nothing here reads or writes; :mod:`islab.rundir` lists what each file holds.
"""

from __future__ import annotations

from pathlib import Path

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
EVAL_FILE = "eval.json"  # islab-train eval: every chosen checkpoint evaluated, and the best
EVAL_PLOT_FILE = "eval.png"
EVALUATED_KEY = "checkpoints"  # eval.json's list of evaluated checkpoints (beside "best")
PLAY_FILE = "play.json"  # islab-train play: the last play of one checkpoint
EXPORT_DIR = "exported"
WANDB_RUN_ID_FILE = "wandb_run_id"
PREFLIGHT_FILE = "preflight.json"
PREFLIGHT_DIR = "preflight"  # the probe's rank logs (NCCL_DEBUG=INFO output)
VIDEOS_DIR = "videos"  # videos/play/ (islab-train play --video), videos/train/ (--video-interval)
TRAINER_RUNS_FILE = "trainer_runs.jsonl"  # an entry point's own run folders (islab.rundir.trainer_runs)


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


def flight_recorder_prefix(run_dir: str | Path) -> Path:
    """``logs/nccl_trace_rank_``: PyTorch's NCCL flight recorder appends the rank to this prefix
    (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) when a collective times out."""
    return logs_dir(run_dir) / "nccl_trace_rank_"


def videos_dir(run_dir: str | Path, kind: str) -> Path:
    """``videos/<kind>/``: ``play`` (islab-train play --video) or ``train`` (--video-interval), the
    folders Isaac Lab's and mjlab's train/play scripts record into."""
    return Path(run_dir, VIDEOS_DIR, kind)


def video_stem(iteration: int, *parts: str) -> str:
    """A video's file name without suffix: ``iter_<N>`` of the policy's iteration, then ``parts``
    (``iter_60-envs_2-return_287.3``); its ``.mp4`` and ``.json`` share it."""
    return "-".join((f"{HISTORY_PREFIX}{iteration}", *parts))


def curves_path(run_dir: str | Path) -> Path:
    return Path(run_dir, CURVES_FILE)


def eval_path(run_dir: str | Path) -> Path:
    return Path(run_dir, EVAL_FILE)


def eval_plot_path(run_dir: str | Path) -> Path:
    return Path(run_dir, EVAL_PLOT_FILE)


def eval_worker_log(run_dir: str | Path, worker: int | str) -> Path:
    """``logs/eval_<I>.log``: what evaluation process ``worker`` of ``islab-train eval`` printed."""
    return logs_dir(run_dir) / f"eval_{worker}.log"
