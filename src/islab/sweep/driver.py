"""Running a planned sweep on Ray Tune: where Ray runs, how trials are fed to Tune, how it ends.

* Ray: an embedded local instance by default, or an existing cluster with ``--ray-address`` /
  ``ray: {address: ...}`` (:mod:`islab.sweep.ray_cluster`). On a cluster every node must see the
  sweep directory at the same path (a shared filesystem) and have islab-train installed.
* Tune: grid and random sweeps hand Tune the planned trial ids (a grid over them), so Tune only
  schedules; Optuna proposes configurations (each repeated once per seed by Ray's ``Repeater``).
  ASHA, when asked, stops weak trials early on the metric. Tune reuses a trial's Ray actor for the
  next trial (``reuse_actors``): no Ray worker process to start per trial.
* The end: each trial's record is written as it ends (:mod:`islab.sweep.summary`). Ctrl-C: Tune
  stops every trial (their islab-train process groups get SIGTERM: they checkpoint and stop);
  Ray is shut down; any process group still alive is stopped. ``--resume SWEEP_DIR`` then runs
  the trials without a record, continuing those that left a checkpoint.
* ``--resume`` of an Optuna sweep continues its search (:func:`optuna_history`): the new study is
  told every configuration whose seeds all ended (the mean of their metrics, as the Repeater
  reported it), the configurations an interrupted attempt left unfinished are proposed first (their
  ended seeds keep their records, the others continue), and Optuna proposes the rest.

Exit status: 0 every trial finished, 1 a trial failed, 130 interrupted (resume it), 2 nothing could start.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islab.spec.issues import Issue, SpecError
from islab.sweep.live import TrialBoard
from islab.sweep.load import LoadedSweep
from islab.sweep.ray_cluster import cluster_fit_issues, kill_descendants, send_token_if_available, start_ray
from islab.sweep.summary import TERMINAL_STATUSES, TRIAL_CONFIG, config_key, is_number, read_records
from islab.sweep.trial_process import ProgressSource, stop_leftovers
from islab.sweep.trials import TRIALS_DIR, SweepPlan, Trial, trial_env

TUNE_DIR = "ray"


class Interrupted(Exception):
    """Ctrl-C reached the sweep (Tune stopped the trials)."""


def progress_source(loaded: LoadedSweep) -> ProgressSource:
    """Our worker writes progress.jsonl; an entry point's progress is its TensorBoard events (under
    the run directory, or where a preset's script writes them)."""
    from datetime import datetime

    from islab.plan.plan import build_plan as build_launch_plan

    base = loaded.base
    if base.entrypoint is None:
        return ProgressSource()
    launch = build_launch_plan(base, now=datetime.now(), free_port=29500)
    # A preset's trainer writes under the trial's own working directory (logs/<lib>): relative to it
    root = None if launch.events_root == launch.run_dir else os.path.relpath(launch.events_root)
    return ProgressSource(events=True, events_root=root, library=launch.events_library)


def remaining(plan: SweepPlan, records: Mapping[str, Mapping[str, Any]]) -> list[Trial]:
    """The planned trials without a finished or failed record (all of them in a new sweep)."""
    return [trial for trial in plan.trials if records.get(trial.id, {}).get("status") not in TERMINAL_STATUSES]


def refused(issues: Sequence[Issue]) -> int:
    """The sweep cannot run where it was sent: say why, start nothing, exit 2."""
    for issue in issues:
        print(issue.message(), file=sys.stderr)
    print("islab-train sweep: nothing was started.", file=sys.stderr)
    return 2


def run_sweep(loaded: LoadedSweep, plan: SweepPlan, *, address: str | None, cwd: str, board_out: Any = None) -> int:
    """Run the trials of ``plan`` that have no record yet; returns the exit status. A resumed sweep
    whose trials have all ended returns at once: no Ray is imported or started."""
    records = read_records(plan.sweep_dir)
    todo = remaining(plan, records)
    if not todo:
        return 1 if any(record["status"] == "failed" for record in records.values()) else 0
    if address is not None:
        send_token_if_available(os.environ, Path.home())  # before Ray is imported: it reads the mode then
    import ray

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # A trial's results lack the metric until its first iteration, and heartbeats never carry one.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # Tune's own result files (CSV, JSON, TensorBoard) duplicate our records, and its TensorBoard
    # logger imports tensorboardX and with it torch: 2 s of the driver before the first trial starts.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    finished = {trial.id for trial in plan.trials} - {trial.id for trial in todo}
    board = TrialBoard(
        plan.trials if loaded.spec.searcher != "optuna" else [t for t in plan.trials if t.id in finished],
        board_out,
        title=f"islab-train sweep {loaded.name}: {plan.sweep_dir}",
    )
    for trial_id in finished:
        record = records[trial_id]
        board.update(trial_id, status=record["status"], metric=record.get("metric"), node=record.get("node"))
    try:
        start_ray(address)
    except SpecError as exc:
        return refused(exc.issues)
    interrupted = False
    try:
        issues = cluster_fit_issues(loaded) if address is not None else []
        if issues:
            return refused(issues)
        with board:
            interrupted = _fit(loaded, plan, todo, records, board, cwd)
    finally:
        ray.shutdown()
        # every trial directory: an Optuna trial's is known only once Optuna chose its configuration
        stop_leftovers(Path(plan.sweep_dir, TRIALS_DIR).glob("*"))
        if address is None:
            kill_descendants()
    if interrupted:
        return 130
    records = read_records(plan.sweep_dir)
    if any(record["status"] == "failed" for record in records.values()):
        return 1
    return 0 if all(trial.id in records for trial in plan.trials) or loaded.spec.searcher == "optuna" else 130


def _fit(
    loaded: LoadedSweep, plan: SweepPlan, todo: list[Trial], records: Mapping[str, Any], board: TrialBoard, cwd: str
) -> bool:
    """Tune over ``todo``; True when Ctrl-C interrupted it."""
    from ray import tune

    from islab.sweep.trainable import IslabTrial, SweepContext

    spec = loaded.spec
    context = SweepContext(
        trials={trial.id: trial for trial in plan.trials},
        cwd=cwd,
        metric=spec.metric.name,
        over_last=spec.metric.over_last,
        source=progress_source(loaded),
        sweep_dir=plan.sweep_dir,
        python=plan.trials[0].argv[0],
        run=dict(spec.run),
        cluster_file=loaded.cluster_file,
        seeds=tuple(spec.seed_list),
        env=trial_env(spec, spec.run, loaded.base.device, loaded.base.nproc_per_node),
        search_keys=tuple(spec.search),
        search_as_args=loaded.search_as_args,
        own_cwd=loaded.own_cwd,
        max_iterations=loaded.base.max_iterations if loaded.base.total_env_steps is None else None,
    )
    trainable = tune.with_resources(
        tune.with_parameters(IslabTrial, context=context), {"cpu": plan.resources.cpu, "gpu": plan.resources.gpu}
    )
    storage = Path(plan.sweep_dir, TUNE_DIR).absolute()
    attempt = len(list(storage.glob("tune-*"))) if storage.exists() else 0
    search_alg, param_space, num_samples = search_algorithm(loaded, todo, records, plan.sweep_dir, attempt)
    if num_samples == 0:  # a resumed Optuna sweep whose configurations have all ended
        return False
    recorder = _recorder(plan.sweep_dir, board, context.trial_for)
    scheduler = None
    if spec.scheduler == "asha":
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(
            time_attr="iteration",
            max_t=loaded.base.max_iterations + 1,  # a trial that reaches its end finishes by itself
            grace_period=spec.asha.grace_period,
            reduction_factor=spec.asha.reduction_factor,
        )
    ranked = scheduler is not None or search_alg is not None
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            num_samples=num_samples,
            max_concurrent_trials=spec.max_concurrent,
            scheduler=scheduler,
            search_alg=search_alg,
            metric="metric" if ranked else None,
            mode=spec.metric.mode if ranked else None,
            reuse_actors=True,  # IslabTrial.reset_config: the next trial in the same Ray worker
        ),
        run_config=tune.RunConfig(
            name=f"tune-{attempt}",
            storage_path=str(storage),
            verbose=0,
            callbacks=[recorder],
            failure_config=tune.FailureConfig(max_failures=0),
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
        ),
    )
    sentinel = _install_sentinel()
    try:
        tuner.fit()
        interrupted = signal.getsignal(signal.SIGINT) is sentinel and not os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        for row in list(board.rows.values()):
            if row.status == "running":
                board.update(row.trial, status="stopped")
    return interrupted


def _install_sentinel() -> Callable[..., None]:
    """Tune replaces the SIGINT handler during fit() and puts the previous one back only when a
    SIGINT arrived: finding ours in place afterwards tells that the sweep was interrupted. A second
    Ctrl-C reaches it and stops at once (the safety net still stops the trials' processes)."""

    def on_second_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_second_interrupt)
    return on_second_interrupt


@dataclass
class OptunaHistory:
    """What earlier attempts of an Optuna sweep did: ``told`` the configurations whose seeds all
    ended, each with the mean of its finished seeds' metrics (None: every seed failed); ``unfinished``
    the configurations started but not ended on every seed (interrupted)."""

    told: list[tuple[dict[str, Any], float | None]] = field(default_factory=list)
    unfinished: list[dict[str, Any]] = field(default_factory=list)


def optuna_history(
    started: Mapping[str, Mapping[str, Any]], records: Mapping[str, Mapping[str, Any]], seeds: Sequence[int]
) -> OptunaHistory:
    """From the trials' ``config.json`` (``started``) and records: see :class:`OptunaHistory`."""
    groups: dict[str, dict[str, Any]] = {}
    for entry in [*started.values(), *records.values()]:
        group = groups.setdefault(config_key(entry["config"]), {"config": dict(entry["config"]), "ended": {}})
        record = records.get(entry["id"])
        if record is not None and record.get("status") in TERMINAL_STATUSES:
            group["ended"][record["seed"]] = record
    history = OptunaHistory()
    for group in groups.values():
        if not set(seeds) <= set(group["ended"]):
            history.unfinished.append(group["config"])
            continue
        values = [r["metric"] for r in group["ended"].values() if r["status"] == "finished" and is_number(r["metric"])]
        history.told.append((group["config"], sum(values) / len(values) if values else None))
    return history


def search_algorithm(
    loaded: LoadedSweep, todo: list[Trial], records: Mapping[str, Any], sweep_dir: str, attempt: int
) -> tuple[Any, dict[str, Any], int]:
    """(search algorithm, param space, num_samples) for Tune."""
    from ray import tune

    spec = loaded.spec
    if spec.searcher != "optuna":
        return None, {"trial": tune.grid_search([trial.id for trial in todo])}, 1
    from ray.tune.search import Repeater
    from ray.tune.search.optuna import OptunaSearch

    history = optuna_history(read_records(sweep_dir, TRIAL_CONFIG), records, spec.seed_list)
    space = OptunaSearch.convert_search_space({key: _tune_space(value) for key, value in spec.search.items()})
    searcher = OptunaSearch(
        space=space,
        metric="metric",
        mode=spec.metric.mode,
        # a new stream per attempt: the first attempt's sampler state is not kept, and the same seed
        # would propose the first attempt's configurations again
        seed=spec.search_seed + attempt,
        points_to_evaluate=history.unfinished or None,  # proposed first
    )
    for config, value in history.told:
        searcher.add_evaluated_point(config, value, error=value is None)
    configs_left = max((spec.samples or 1) - len(history.told), 0)
    return Repeater(searcher, repeat=len(spec.seed_list)), {}, configs_left * len(spec.seed_list)


def _tune_space(space: Any) -> Any:
    from ray import tune

    if isinstance(space, list):
        return tune.choice(space)
    low_high = list(space.bounds)
    return {
        "uniform": lambda: tune.uniform(*low_high),
        "loguniform": lambda: tune.loguniform(*low_high),
        "randint": lambda: tune.randint(*low_high),
        "choice": lambda: tune.choice(low_high),
    }[space.kind]()


def _recorder(sweep_dir: str, board: TrialBoard, trial_for: Callable[[Mapping[str, Any]], Trial]) -> Any:
    from islab.sweep.recorder import Recorder

    return Recorder(sweep_dir, board, trial_for)
