"""``islab-train sweep SWEEP.yaml [--dry-run [--json]] [--ray-address HOST:PORT] [--json]``
and ``islab-train sweep --resume SWEEP_DIR``.

The order is the launcher's: read and check everything (exit 2 with one line per problem, nothing
started), print the plan (``--dry-run``), and only then import Ray (the ``[sweep]`` extra) and run.
The sweep directory keeps what ``--resume`` needs: ``sweep.yaml`` (the file as given) and
``sweep-state.json`` (its name, the working directory, the resolved cluster file, the interpreter).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from islab.doctor.probes import visible_gpu_count
from islab.fit import cache
from islab.plan.plan import RUN_DIR_TIME_FORMAT
from islab.resolve.resolve import install_extra_hint
from islab.rundir import claim_new_dir, read_json_object, write_json
from islab.spec.issues import Issue, SpecError
from islab.sweep import dry_run
from islab.sweep.load import LoadedSweep, fit_issues, load_sweep, packing_issue, parse_sweep
from islab.sweep.summary import SWEEP_JSON, read_records, summarize, write_outputs
from islab.sweep.trials import SweepPlan, build_plan, sweep_dir_for

EXTRA = "sweep"
EXTRA_MODULES = ("ray", "optuna")
SWEEP_COPY = "sweep.yaml"
STATE_FILE = "sweep-state.json"


def missing_extra() -> list[str]:
    """Modules of the [sweep] extra that are not installed (found without importing them)."""
    missing = []
    for name in EXTRA_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except ValueError:  # a module object without a spec (tests replace modules this way)
            missing.append(name)
    return missing


def sweep_main(
    sweep_file: Path | None, *, resume: Path | None, dry_run_only: bool, json_output: bool, ray_address: str | None
) -> int:
    try:
        loaded, plan, cwd = _prepare(sweep_file, resume, ray_address)
    except SpecError as exc:
        for issue in exc.issues:
            print(issue.message(), file=sys.stderr)
        return 2
    if dry_run_only:
        print(dry_run.format_json(plan) if json_output else dry_run.format_text(plan, loaded.source))
        return 0
    address = ray_address or loaded.spec.ray.address
    if address is None:
        issues = fit_issues(
            loaded.resources,
            nproc_per_node=loaded.base.nproc_per_node,
            device=loaded.base.device,
            cpus=float(os.cpu_count() or 1),
            gpus=float(visible_gpu_count()),
            where="this machine",
        )
        if loaded.base.device == "cuda":  # packed trials against the memory islab-train fit measured
            packed = packing_issue(loaded.base.num_envs, loaded.spec.trials_per_gpu, cache.measured(loaded.base))
            issues += [packed] if packed is not None else []
        if issues:
            for issue in issues:
                print(
                    Issue(f"{Path(loaded.source).name}: {issue.field}", issue.problem, issue.fix).message(),
                    file=sys.stderr,
                )
            return 2
    missing = missing_extra()
    if missing:
        print(
            Issue(
                "islab-train sweep",
                f"needs the [{EXTRA}] extra (Ray Tune and Optuna): {', '.join(missing)} not installed",
                install_extra_hint(EXTRA),
            ).message(),
            file=sys.stderr,
        )
        return 2
    if resume is None:
        plan = claim_sweep_dir(loaded, plan)
        _write_state(loaded, plan, cwd, sweep_file)
    print(
        f"islab-train sweep: {len(plan.trials)} trial(s), {plan.resources.describe()} each; sweep directory: "
        f"{plan.sweep_dir}",
        file=sys.stderr,
    )
    from islab.sweep.driver import run_sweep

    code = run_sweep(loaded, plan, address=address, cwd=cwd)
    if code == 2:
        return 2
    result = summarize(
        read_records(plan.sweep_dir).values(),
        mode=loaded.spec.metric.mode,
        commands={trial.id: trial.command for trial in plan.trials},
    )
    result = {
        **result,
        "sweep_dir": plan.sweep_dir,
        "metric": loaded.spec.metric.model_dump(),
        "interrupted": code == 130,
    }
    write_outputs(plan.sweep_dir, result, metric=loaded.spec.metric.name)
    _report(result, plan, json_output=json_output, interrupted=code == 130)
    # Everything is written and Ray is stopped; what is left is the interpreter's teardown of Ray's
    # core worker (its gRPC threads), ~1 s that the user would wait for.
    from islab.preflight.quick_exit import end

    end(code)


def _prepare(
    sweep_file: Path | None, resume: Path | None, ray_address: str | None
) -> tuple[LoadedSweep, SweepPlan, str]:
    if (sweep_file is None) == (resume is None):
        raise SpecError(
            Issue(
                "islab-train sweep",
                "give a SWEEP.yaml, or --resume SWEEP_DIR (not both)",
                "e.g. islab-train sweep configs/sweeps/cartpole-lr.yaml",
            )
        )
    if resume is not None:
        state_path = resume / STATE_FILE
        state = read_json_object(state_path)
        if state is None:
            raise SpecError(
                Issue(
                    "--resume",
                    f"{resume} is not a sweep directory (no readable {STATE_FILE})",
                    "Give the directory a sweep printed at its start (logs/sweeps/<name>/<time>)",
                )
            )
        loaded = load_sweep(
            resume / SWEEP_COPY, name=state["name"], cluster_file=state["cluster_file"], workdir=state["cwd"]
        )
        return loaded, plan_of(loaded, str(resume.absolute()), state["python"]), state["cwd"]
    assert sweep_file is not None
    loaded = load_sweep(sweep_file)
    stamp = datetime.now().strftime(RUN_DIR_TIME_FORMAT)
    sweep_dir = str(Path(sweep_dir_for(loaded.spec, loaded.name, stamp)).absolute())
    return loaded, plan_of(loaded, sweep_dir, sys.executable), os.getcwd()


def plan_of(loaded: LoadedSweep, sweep_dir: str, python: str) -> SweepPlan:
    """Every trial of a checked sweep, in ``sweep_dir``, run by ``python``."""
    return build_plan(
        loaded.spec,
        sweep_dir=sweep_dir,
        python=python,
        device=loaded.base.device,
        nproc_per_node=loaded.base.nproc_per_node,
        cluster_file=loaded.cluster_file,
        search_as_args=loaded.search_as_args,
        own_cwd=loaded.own_cwd,
    )


def claim_sweep_dir(loaded: LoadedSweep, plan: SweepPlan) -> SweepPlan:
    """The plan in a sweep directory this new sweep created alone (:func:`islab.rundir.claim_new_dir`):
    two sweeps of one file started in the same second would otherwise share it, and their trials'
    run directories with it."""
    claimed = str(claim_new_dir(plan.sweep_dir))
    return plan if claimed == plan.sweep_dir else plan_of(loaded, claimed, sys.executable)


def _write_state(loaded: LoadedSweep, plan: SweepPlan, cwd: str, sweep_file: Path | None) -> None:
    sweep_dir = Path(plan.sweep_dir)
    assert sweep_file is not None
    (sweep_dir / SWEEP_COPY).write_text(sweep_file.read_text(encoding="utf-8"), encoding="utf-8")
    write_json(
        sweep_dir / STATE_FILE,
        {
            "name": loaded.name,
            "cwd": cwd,
            "cluster_file": loaded.cluster_file,
            "python": plan.trials[0].argv[0] if plan.trials else sys.executable,
            "source": loaded.source,
        },
    )


def _report(result: dict[str, Any], plan: SweepPlan, *, json_output: bool, interrupted: bool) -> None:
    from islab.sweep.summary import CONFIG_HEADER, FAILED_HEADER, config_rows, failed_rows

    if json_output:
        print(json.dumps(result, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
        for title, header, rows in (
            ("configurations, best first", CONFIG_HEADER, config_rows(result)),
            ("failed trials", FAILED_HEADER, failed_rows(result)),
        ):
            if not rows:
                continue
            table = Table(title=title, title_justify="left")
            for column in header:
                table.add_column(column)
            for row in rows:
                table.add_row(*row)
            console.print(table)
        if result["best"]:
            console.print(f"best: {result['best']['command']}", markup=False, soft_wrap=True)
    where = Path(plan.sweep_dir)
    if interrupted:
        print(f"islab-train sweep: interrupted; continue it with: islab-train sweep --resume {where}", file=sys.stderr)
    print(f"islab-train sweep: {where / SWEEP_JSON}, summary.md, curves.png", file=sys.stderr)


__all__ = ["claim_sweep_dir", "parse_sweep", "sweep_main"]
