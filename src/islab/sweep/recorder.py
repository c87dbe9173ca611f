"""Tune's callbacks -> the live table and one record per trial (``trials/<id>/trial.json``).

A trial that ends by itself reports its outcome in its last result (``trial_status``), and its
record is written at once. A trial a scheduler stopped early (ASHA) ends without one: it counts
as finished (``stopped_early``) with the metric it had, recorded at once too. (Ctrl-C does not
end trials this way: Tune stops them without ``on_trial_complete``, so they keep no record and
``--resume`` runs them again.) A trial an earlier attempt ended (``kept``, see
:class:`islab.sweep.trainable.IslabTrial`) keeps the record it has. Each record keeps the trial's
curve (env steps, value per iteration) for curves.png. Needs Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray import tune

from islab.sweep.live import TrialBoard
from islab.sweep.summary import write_record
from islab.sweep.trials import Trial, config_label


class Recorder(tune.Callback):
    def __init__(self, sweep_dir: str, board: TrialBoard, trial_for: Callable[[Mapping[str, Any]], Trial]) -> None:
        self.sweep_dir = sweep_dir
        self.board = board
        self.trial_for = trial_for
        self.curves: dict[str, list[list[Any]]] = {}
        self.written: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks into the experiment state (for Tune's own restore, which the
        sweep does not use: --resume reads the trial records); the board (a lock, a live display)
        stays behind."""
        return {**self.__dict__, "board": None}

    def _trial(self, tune_trial: Any) -> Trial:
        return self.trial_for(tune_trial.config)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        ours = self._trial(trial)
        self.board.update(ours.id, config=config_label(ours.config), seed=ours.seed, status="running")

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        ours = self._trial(trial)
        if result.get("value") is not None:
            self.curves.setdefault(ours.id, []).append([result.get("env_steps"), result["value"]])
        if result.get("kept"):
            self.written.add(ours.id)
            self._show(ours, result["trial_status"], result.get("metric"), result.get("node"))
            return
        if "trial_status" in result:
            self._write(ours, result, status=result["trial_status"])
            return
        if "iteration" not in result:  # a heartbeat (see IslabTrial.step)
            return
        self.board.update(
            ours.id,
            config=config_label(ours.config),
            seed=ours.seed,
            status="running",
            iteration=result.get("iteration"),
            metric=result.get("metric"),
            node=result.get("node"),
        )

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        ours = self._trial(trial)
        last = trial.last_result or {}
        if "trial_status" in last:
            self._write(ours, last, status=last["trial_status"])
        else:  # a scheduler stopped it
            self._write(ours, last, status="finished", stopped_early=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        ours = self._trial(trial)
        error = getattr(trial, "error_file", None)
        self._write(
            ours,
            {**(trial.last_result or {}), "error": f"the trial's Ray actor failed (see {error})", "exit_code": None},
            status="failed",
        )

    def _write(self, ours: Trial, result: Mapping[str, Any], *, status: str, stopped_early: bool = False) -> None:
        if ours.id in self.written:
            return
        self.written.add(ours.id)
        record = {
            "id": ours.id,
            "config": dict(ours.config),
            "seed": ours.seed,
            "status": status,
            "metric": result.get("metric"),
            "run_dir": result.get("run_dir"),
            "log": result.get("log"),
            "start": result.get("start"),
            "end": result.get("end", result.get("timestamp")),
            "node": result.get("node"),
            "exit_code": result.get("exit_code"),
            "error": result.get("error"),
            "stopped_early": stopped_early,
            "resumed_from": result.get("resumed_from"),
            "command": ours.command,
            "curve": self.curves.get(ours.id, []),
        }
        write_record(self.sweep_dir, record)
        self._show(ours, status, record["metric"], record["node"])

    def _show(self, ours: Trial, status: str, metric: Any, node: Any) -> None:
        self.board.update(
            ours.id, config=config_label(ours.config), seed=ours.seed, status=status, metric=metric, node=node
        )
