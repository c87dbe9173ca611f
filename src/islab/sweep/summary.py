"""The sweep's result: ``sweep.json``, ``summary.md`` and the same table on the terminal.

Trial records (one per trial, ``trials/<id>/trial.json``, written by the driver as each trial
ends) are the truth; everything here is derived from them, so ``--resume`` only has to add the
missing records and derive again. ``sweep.json``::

    {"trials":  [{"id", "config", "seed", "status": "finished"|"failed", "metric", "run_dir", "log",
                  "start", "end", "node", "exit_code", "error", ...}],
     "configs": [{"config", "metric_mean", "metric_std", "seeds", "finished"}],   # best first
     "best":    {"config", "metric_mean", "command"}}     # command: the islab-train line of its first seed

A configuration's ``metric_mean``/``metric_std`` are over its finished seeds (std: population, 0
for one seed); configurations without a finished seed sort last.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from islab.rundir import read_json_object, write_json, write_text_atomic
from islab.spec.text import escape
from islab.sweep.trials import TRIALS_DIR, Trial, config_label

TRIAL_RECORD = "trial.json"
TRIAL_CONFIG = "config.json"  # written when a trial starts: what it runs (Optuna's choice), before any outcome
SWEEP_JSON = "sweep.json"
SUMMARY_MD = "summary.md"
CURVES_PNG = "curves.png"
TERMINAL_STATUSES = ("finished", "failed")


def record_path(sweep_dir: str | Path, trial_id: str) -> Path:
    return Path(sweep_dir, TRIALS_DIR, trial_id, TRIAL_RECORD)


def write_record(sweep_dir: str | Path, record: Mapping[str, Any]) -> Path:
    path = record_path(sweep_dir, record["id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json(path, record)


def read_records(sweep_dir: str | Path, name: str = TRIAL_RECORD) -> dict[str, dict[str, Any]]:
    """Every trial record of the sweep, by trial id (``name``: :data:`TRIAL_CONFIG` for every trial
    that started, ended or not)."""
    records = {}
    for path in sorted(Path(sweep_dir, TRIALS_DIR).glob(f"*/{name}")):
        record = read_json_object(path)
        if record is not None and isinstance(record.get("id"), str):
            records[record["id"]] = record
    return records


def kept_record(sweep_dir: str | Path, trial_id: str) -> dict[str, Any] | None:
    """The trial's record when it ended (finished or failed) in an earlier attempt, else None."""
    record = read_json_object(record_path(sweep_dir, trial_id))
    return record if record is not None and record.get("status") in TERMINAL_STATUSES else None


def write_trial_config(trial: Trial) -> Path:
    """``trials/<id>/config.json``: the trial's configuration and seed, as it starts (an Optuna
    trial's configuration is known nowhere else until it ends)."""
    path = Path(trial.log_dir, TRIAL_CONFIG)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json(path, {"id": trial.id, "config": dict(trial.config), "seed": trial.seed})


def config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True)


def summarize(records: Iterable[Mapping[str, Any]], *, mode: str, commands: Mapping[str, str]) -> dict[str, Any]:
    """sweep.json's content from the trial records (``commands``: trial id -> its islab-train line)."""
    trials = sorted(records, key=lambda record: record["id"])
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for trial in trials:
        groups.setdefault(config_key(trial["config"]), []).append(trial)
    configs = []
    for members in groups.values():
        values = [t["metric"] for t in members if t["status"] == "finished" and is_number(t.get("metric"))]
        configs.append(
            {
                "config": dict(members[0]["config"]),
                "metric_mean": statistics.fmean(values) if values else None,
                "metric_std": statistics.pstdev(values) if values else None,
                "seeds": sorted(t["seed"] for t in members),
                "finished": sum(t["status"] == "finished" for t in members),
                "trials": [t["id"] for t in members],
            }
        )
    sign = -1.0 if mode == "max" else 1.0
    configs.sort(key=lambda c: (c["metric_mean"] is None, sign * (c["metric_mean"] or 0.0)))
    best = None
    if configs and configs[0]["metric_mean"] is not None:
        top = configs[0]
        first = min((t for t in trials if t["id"] in top["trials"]), key=lambda t: t["seed"])
        best = {
            "config": top["config"],
            "metric_mean": top["metric_mean"],
            "command": commands.get(first["id"]) or first.get("command"),
        }
    return {"trials": [dict(t) for t in trials], "configs": configs, "best": best}


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _fmt(value: Any) -> str:
    return "-" if not is_number(value) else f"{value:.4g}"


def config_rows(result: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for rank, config in enumerate(result["configs"], start=1):
        mean, std = config["metric_mean"], config["metric_std"]
        rows.append(
            [
                str(rank),
                config_label(config["config"]),
                _fmt(mean) if std is None else f"{_fmt(mean)} ± {_fmt(std)}",
                ", ".join(map(str, config["seeds"])),
                f"{config['finished']}/{len(config['seeds'])}",
            ]
        )
    return rows


CONFIG_HEADER = ["#", "config", "metric (mean ± std over seeds)", "seeds", "finished"]


def failed_rows(result: Mapping[str, Any]) -> list[list[str]]:
    return [
        [t["id"], str(t.get("exit_code")), escape(str(t.get("error") or "")), str(t.get("log"))]
        for t in result["trials"]
        if t["status"] == "failed"
    ]


FAILED_HEADER = ["trial", "exit code", "first error line", "log"]


def markdown(result: Mapping[str, Any], *, metric: str, sweep_dir: str) -> str:
    lines = [f"# Sweep {sweep_dir}", "", f"Metric: {metric}. Configurations, best first:", ""]
    lines += _md_table(CONFIG_HEADER, config_rows(result))
    if result["best"]:
        lines += ["", "Best configuration's command (its first seed):", "", f"    {result['best']['command']}"]
    failed = failed_rows(result)
    if failed:
        lines += ["", "Failed trials:", "", *_md_table(FAILED_HEADER, failed)]
    lines += ["", "Trials:", ""]
    lines += _md_table(
        ["trial", "config", "seed", "status", "metric", "node", "run dir"],
        [
            [
                t["id"],
                config_label(t["config"]),
                str(t["seed"]),
                t["status"],
                _fmt(t.get("metric")),
                str(t.get("node") or "-"),
                str(t.get("run_dir") or "-"),
            ]
            for t in result["trials"]
        ],
    )
    return "\n".join(lines) + "\n"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *["| " + " | ".join(cell(value) for value in row) + " |" for row in rows],
    ]


def write_outputs(sweep_dir: str | Path, result: Mapping[str, Any], *, metric: str) -> None:
    """sweep.json, summary.md and curves.png in the sweep directory."""
    from islab.sweep.curves import write_sweep_curves

    write_json(Path(sweep_dir, SWEEP_JSON), result)
    write_text_atomic(Path(sweep_dir, SUMMARY_MD), markdown(result, metric=metric, sweep_dir=str(sweep_dir)))
    write_sweep_curves(result, Path(sweep_dir, CURVES_PNG), metric=metric)
