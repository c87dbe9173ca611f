"""The Ray Tune trainable: one trial = one islab-train process, its metrics reported as it trains.

Tune calls :meth:`IslabTrial.step` again and again; each call returns the next progress record of
the trial's run (one Tune iteration = one training iteration, so ASHA's ``grace_period`` counts
training iterations), with ``metric`` = the sweep's metric so far. When islab-train exits, the
last result carries ``done`` and the trial's outcome (``trial_status`` finished/failed, exit
code, first error line, logs, node). A failed trial is an outcome, not an exception: Tune goes on
with the others and the summary reports it.

When Tune stops a trial early (ASHA, Ctrl-C), :meth:`cleanup` stops the process group; our worker
checkpoints on SIGTERM, so ``islab-train sweep --resume`` continues that run (``--resume RUN_DIR``)
instead of starting it again.

Needs the ``[sweep]`` extra (Ray); imported only by the driver.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import tune

from islab.sweep.summary import kept_record, write_trial_config
from islab.sweep.trial_process import MetricWindow, ProgressSource, TrialProcess, continuation_argv
from islab.sweep.trials import TRIALS_DIR, Trial, trial_argv

POLL_S = 0.25
HEARTBEAT_S = 2.0
# Keys of the config Tune hands each trial: ours, and Ray's Repeater's (which seed of a group).
TRIAL_KEY = "trial"
REPEAT_INDEX_KEY = "__trial_index__"


@dataclass(frozen=True)
class SweepContext:
    """What every trial needs to know, shipped once to the Ray workers (tune.with_parameters)."""

    trials: Mapping[str, Trial]
    cwd: str
    metric: str
    over_last: int
    source: ProgressSource
    # For Optuna trials, whose argv is built once Optuna has chosen the configuration:
    sweep_dir: str = ""
    python: str = sys.executable
    run: Mapping[str, Any] = field(default_factory=dict)
    cluster_file: str | None = None
    seeds: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    search_keys: tuple[str, ...] = ()
    search_as_args: bool = False  # see islab.sweep.trials.trial_argv
    own_cwd: bool = False  # see islab.sweep.trials.Trial.cwd
    # Iterations of a trial (None with a total_env_steps budget: an interrupted trial starts again)
    max_iterations: int | None = None

    def trial_for(self, config: Mapping[str, Any]) -> Trial:
        """The planned trial (grid/random), or one built from Optuna's choice and the repeat index."""
        if TRIAL_KEY in config:
            return self.trials[config[TRIAL_KEY]]
        chosen = {key: config[key] for key in self.search_keys}
        seed = self.seeds[int(config.get(REPEAT_INDEX_KEY, 0))]
        digest = hashlib.sha1(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:6]
        ident = f"o{digest}-s{seed}"
        log_dir = str(Path(self.sweep_dir, TRIALS_DIR, ident))
        argv = trial_argv(
            self.python, self.run, self.cluster_file, seed, log_dir, chosen, search_as_args=self.search_as_args
        )
        return Trial(ident, -1, chosen, seed, log_dir, argv, self.env, log_dir if self.own_cwd else None)


class IslabTrial(tune.Trainable):
    """One sweep trial (a Tune class trainable, so that stopping it can stop its process)."""

    def setup(self, config: dict[str, Any], context: SweepContext) -> None:  # type: ignore[override]
        self.context = context
        self.node = ray.util.get_node_ip_address()
        self.begin(config)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Tune reuses this actor for the next trial (``reuse_actors``): no new Ray worker process to
        start and import Tune. A trial a scheduler stopped early still runs here: stop it first."""
        self.cleanup()
        self.begin(new_config)
        return True

    def begin(self, config: Mapping[str, Any]) -> None:
        """Start one trial in this actor: setup and reset_config call it (public: a test drives it
        without a Ray actor around it)."""
        context = self.context
        self.trial = context.trial_for(config)
        self.window = MetricWindow(context.metric, context.over_last)
        self.pending: deque[dict[str, Any]] = deque()
        self.start = time.time()
        # an earlier attempt of a resumed Optuna sweep ended it (a seed of a configuration that is
        # finished now): its record stands, nothing runs again
        self.kept = kept_record(context.sweep_dir, self.trial.id)
        # an attempt stopped by Ctrl-C left a checkpoint: continue it up to the trial's iterations
        argv, self.resumed_from = continuation_argv(self.trial.argv, self.trial.log_dir, context.max_iterations)
        self.process = TrialProcess(
            argv, self.trial.env, self.trial.cwd or context.cwd, self.trial.log_dir, context.source,
            run_dir=self.resumed_from,
        )  # fmt: skip
        if self.kept is None:
            write_trial_config(self.trial)
            self.process.start()

    def step(self) -> dict[str, Any]:
        if self.kept is not None:
            return self._kept_outcome(self.kept)
        beat = time.monotonic() + HEARTBEAT_S
        while True:
            if self.pending:
                record = self.pending.popleft()
                self.window.add(record)
                return self._result(record)
            exit_code = self.process.poll()
            records = self.process.new_records()
            if records:
                self.pending.extend(records)
                continue
            if exit_code is not None:
                return self._outcome(exit_code)
            if time.monotonic() > beat:
                # Tune's stop() waits behind a running step(): return now and then without an
                # iteration (schedulers key on "iteration", which this result lacks).
                return self._facts()
            time.sleep(POLL_S)

    def _facts(self) -> dict[str, Any]:
        """What every result carries (the last one a scheduler saw is all the driver gets of a
        trial it stopped early). ``metric`` is left out until there is one: schedulers compare it."""
        facts = {
            "trial_id_islab": self.trial.id,
            "config_islab": dict(self.trial.config),
            "seed": self.trial.seed,
            "log": str(self.process.output_log),
            "run_dir": str(self.process.run_dir) if self.process.run_dir else None,
            "start": self.start,
            "node": self.node,
            "resumed_from": self.resumed_from,
        }
        if self.window.value is not None:
            facts["metric"] = self.window.value
        return facts

    def _result(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **self._facts(),
            "iteration": record.get("iteration"),
            "env_steps": record.get("job_env_steps", record.get("env_steps")),
            "value": record.get(self.context.metric),
        }

    def _outcome(self, exit_code: int) -> dict[str, Any]:
        self.process.finish()
        status = "finished" if exit_code == 0 else "failed"
        return {
            **self._facts(),
            "done": True,
            "trial_status": status,
            "exit_code": exit_code,
            "error": None if status == "finished" else self.process.first_error_line(),
            "end": time.time(),
        }

    def _kept_outcome(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The recorded outcome, for Tune and its searcher (Ray's Repeater averages the seeds' metrics)."""
        outcome = {
            "trial_id_islab": self.trial.id,
            "done": True,
            "kept": True,
            "trial_status": record["status"],
            "node": record.get("node"),
        }
        if record.get("metric") is not None:
            outcome["metric"] = record["metric"]
        return outcome

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Nothing for Tune to keep: the trial's own run directory holds its checkpoints."""
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        return None

    def cleanup(self) -> None:
        if self.process.poll() is None:
            self.process.stop()
        self.process.finish()
