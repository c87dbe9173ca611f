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
    play.json                the last ``islab-train play``: episode return/length statistics
    eval.json                the last ``islab-train eval``: every chosen checkpoint's return, success
                             rate and episode length, and the best of them (``play --checkpoint best``)
    eval.png                 its return and success rate against iteration, the best marked
    logs/eval_<I>.log        what evaluation process I of ``islab-train eval`` printed
    exported/policy.pt       ``islab-train export``: TorchScript policy (normalizer folded in)
    exported/policy.onnx     the same policy as ONNX
    exported/policy.json     its inputs, outputs, action scaling, library, checkpoint
    trainer_runs.jsonl       Isaac Lab's train.py: its own run folder of each launch (the launcher
                             appends; :mod:`~islab.rundir.trainer_runs`)

The launcher reads what the ranks write (progress, summary, logs) and the ranks read what an
earlier run wrote (checkpoints, progress after an elastic restart), so both sides import the
names from here. A progress record is
``{"iteration", "max_iterations", "env_steps", "steps_per_s", "mean_return", "time_s", "job_env_steps"}``
(``env_steps``: all ranks, since this job started; ``job_env_steps``: since the run began, across
resumes) plus ``"losses": {name: value}`` where the library gives them cheaply.

The package is split by concept: :mod:`~islab.rundir.layout` (names and paths),
:mod:`~islab.rundir.interpret` (what a path a user gives means), :mod:`~islab.rundir.progress`
(``progress.jsonl``), :mod:`~islab.rundir.records` (every other record),
:mod:`~islab.rundir.claim` (a new directory, claimed atomically) and
:mod:`~islab.rundir.trainer_runs` (an entry point's own run folders and their checkpoints, imported
from there). Its API is the names imported here: ``from islab import rundir; rundir.latest_checkpoint(run)``.
"""

from __future__ import annotations

from islab.rundir.claim import claim_new_dir
from islab.rundir.interpret import (
    RESUME_FORMS,
    best_checkpoint,
    chosen_checkpoint,
    continued_run_dir,
    evaluated_best,
    reached_target,
    recorded_returns,
    resume_source,
    run_dir_of,
)
from islab.rundir.layout import (
    AGENT_FILE,
    CHECKPOINT_CHOICES,
    CHECKPOINTS_DIR,
    CURVES_FILE,
    DIGESTS_DIR,
    EVAL_FILE,
    EVAL_PLOT_FILE,
    EVALUATED_KEY,
    EXPORT_DIR,
    HEARTBEATS_DIR,
    HISTORY_PREFIX,
    LATEST_CHECKPOINT,
    LAUNCH_FILE,
    LOGS_DIR,
    PLAY_FILE,
    PREFLIGHT_DIR,
    PREFLIGHT_FILE,
    PROGRESS_FILE,
    SPEC_FILE,
    SUMMARY_FILE,
    VIDEOS_DIR,
    WANDB_RUN_ID_FILE,
    checkpoint_dir,
    curves_path,
    digest_path,
    eval_path,
    eval_plot_path,
    eval_worker_log,
    flight_recorder_prefix,
    heartbeat_path,
    history_checkpoint,
    history_checkpoints,
    latest_checkpoint,
    logs_dir,
    preflight_path,
    preflight_rank_log,
    progress_path,
    rank_log,
    rank_logs,
    summary_path,
    video_stem,
    videos_dir,
)
from islab.rundir.progress import (
    ProgressReader,
    ProgressWriter,
    parse_record,
    read_progress,
)
from islab.rundir.records import (
    STACK_DUMP_SIGNAL,
    SUMMARY_CHECKPOINT,
    SUMMARY_LIBRARY_CHECKPOINT,
    digest_divergence,
    read_digests,
    read_heartbeats,
    read_json_object,
    read_lines,
    read_preflight,
    read_run_spec,
    read_summary,
    wandb_run_id,
    write_digest,
    write_figure_atomic,
    write_heartbeat,
    write_json,
    write_launch_record,
    write_run_spec,
    write_summary,
    write_text_atomic,
    write_yaml,
)

__all__ = [
    "AGENT_FILE",
    "CHECKPOINTS_DIR",
    "CHECKPOINT_CHOICES",
    "CURVES_FILE",
    "DIGESTS_DIR",
    "EVALUATED_KEY",
    "EVAL_FILE",
    "EVAL_PLOT_FILE",
    "EXPORT_DIR",
    "HEARTBEATS_DIR",
    "HISTORY_PREFIX",
    "LATEST_CHECKPOINT",
    "LAUNCH_FILE",
    "LOGS_DIR",
    "PLAY_FILE",
    "PREFLIGHT_DIR",
    "PREFLIGHT_FILE",
    "PROGRESS_FILE",
    "RESUME_FORMS",
    "SPEC_FILE",
    "STACK_DUMP_SIGNAL",
    "SUMMARY_CHECKPOINT",
    "SUMMARY_FILE",
    "SUMMARY_LIBRARY_CHECKPOINT",
    "VIDEOS_DIR",
    "WANDB_RUN_ID_FILE",
    "ProgressReader",
    "ProgressWriter",
    "best_checkpoint",
    "checkpoint_dir",
    "chosen_checkpoint",
    "claim_new_dir",
    "continued_run_dir",
    "curves_path",
    "digest_divergence",
    "digest_path",
    "eval_path",
    "eval_plot_path",
    "eval_worker_log",
    "evaluated_best",
    "flight_recorder_prefix",
    "heartbeat_path",
    "history_checkpoint",
    "history_checkpoints",
    "latest_checkpoint",
    "logs_dir",
    "parse_record",
    "preflight_path",
    "preflight_rank_log",
    "progress_path",
    "rank_log",
    "rank_logs",
    "reached_target",
    "read_digests",
    "read_heartbeats",
    "read_json_object",
    "read_lines",
    "read_preflight",
    "read_progress",
    "read_run_spec",
    "read_summary",
    "recorded_returns",
    "resume_source",
    "run_dir_of",
    "summary_path",
    "video_stem",
    "videos_dir",
    "wandb_run_id",
    "write_digest",
    "write_figure_atomic",
    "write_heartbeat",
    "write_json",
    "write_launch_record",
    "write_run_spec",
    "write_summary",
    "write_text_atomic",
    "write_yaml",
]
