"""The ``fit`` subcommand: the job's options resolved like a launch, then :func:`islab.fit.search.fit`
measures one rank at doubling ``num_envs`` and prints the table and the recommendation (docs/FIT.md).

Exit codes: 0 a size was recommended; 1 none fits, or a child failed for a reason other than memory;
2 the options are wrong (nothing started).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from islab.cli.options import keyword, signature
from islab.cli.spec_layers import fail, resolve
from islab.fit import cache
from islab.fit.search import (
    DEFAULT_CHILD_TIMEOUT_S,
    DEFAULT_ITERATIONS,
    DEFAULT_MIN_NUM_ENVS,
    MAX_GROWTH,
    FitError,
    FitSettings,
    child_argv,
    fit,
)
from islab.fit.table import DEFAULT_MEMORY_FRACTION, format_bytes, format_table, knee, recommend, to_json
from islab.spec.issues import Issue, SpecError

PANEL_FIT = "Fit"


def _option(name: str, kind: Any, default: Any, help_text: str, flag: str | None = None, metavar: str | None = None):
    args = (flag,) if flag else ()
    return keyword(
        name, Annotated[kind, typer.Option(*args, help=help_text, rich_help_panel=PANEL_FIT, metavar=metavar)], default
    )


FIT_OPTIONS = (
    _option("json_output", bool, False, "Print the result as JSON (the table goes to stderr).", "--json"),
    _option("memory_fraction", float, DEFAULT_MEMORY_FRACTION,
            "Recommend the largest num_envs whose peak memory stays within this share of the device's memory."),
    _option("memory_limit", int | None, None,
            "Use this many bytes as the device's memory instead (leave room for other jobs on the same GPU).",
            metavar="BYTES"),
    _option("min_num_envs", int, DEFAULT_MIN_NUM_ENVS, "The first size measured; each next one doubles it."),
    _option("max_num_envs", int | None, None,
            f"The largest size measured. Default: {MAX_GROWTH} x the job's num_envs."),
    _option("iterations", int, DEFAULT_ITERATIONS,
            "Training iterations per size; steps/s is the last one's (the first includes start-up)."),
    _option("dry_run", bool, False, "Print the sizes and the first child's command; measure nothing.", "--dry-run"),
    _option("child_timeout", float, DEFAULT_CHILD_TIMEOUT_S, "Seconds one size may take; slower counts as not fitting.",
            metavar="SECONDS"),
)  # fmt: skip

FIT_EPILOG = """\
[bold]Examples[/bold]

  [dim]# how many Cartpole envs one CPU rank of a 2-rank job can hold, and how fast[/dim]
  islab-train fit --lib rsl_rl --device cpu --nproc 2 --max-num-envs 1024

  [dim]# one GPU, leaving 20 GB for another job, as JSON[/dim]
  islab-train fit --lib rl_games --gpus 1 --memory-limit 60000000000 --json

Each size runs one rank of the job in a child process for --iterations training iterations. An
out-of-memory child is a row that does not fit, never a failure. `--num-envs auto` on a launch
uses the recommendation, measured once and cached.
"""


def settings_of(options: dict[str, Any], job_num_envs: int) -> FitSettings:
    """The fit options, checked: every problem named with its fix (exit 2)."""
    issues = []
    fraction = options["memory_fraction"]
    if not 0 < fraction <= 1:
        issues.append(Issue("--memory-fraction", f"{fraction} is not in (0, 1]", "Give a share such as 0.85"))
    limit = options["memory_limit"]
    if limit is not None and limit <= 0:
        issues.append(Issue("--memory-limit", f"{limit} is not a positive number of bytes",
                            "Give bytes, e.g. --memory-limit 8000000000 for 8 GB"))  # fmt: skip
    low, high = options["min_num_envs"], options["max_num_envs"] or MAX_GROWTH * job_num_envs
    if low < 1:
        issues.append(Issue("--min-num-envs", f"{low} is below 1", "Give a positive number, e.g. 64"))
    elif high < low:
        issues.append(Issue("--max-num-envs", f"{high} is below --min-num-envs {low}",
                            f"Give --max-num-envs >= {low}"))  # fmt: skip
    if options["iterations"] < 1:
        issues.append(Issue("--iterations", f"{options['iterations']} is below 1", "Give 1 or 2"))
    if options["child_timeout"] <= 0:
        issues.append(Issue("--child-timeout", "must be positive", "Give seconds, e.g. 600"))
    if issues:
        raise SpecError(issues)
    return FitSettings(fraction, limit, low, high, options["iterations"], options["child_timeout"])


def print_dry_run(spec: Any, settings: FitSettings) -> None:
    """What fit would run: the sizes at most, and the first child's command line (paste-safe)."""
    sizes, size = [], settings.min_num_envs
    while size <= settings.max_num_envs:
        sizes.append(size)
        size *= 2
    argv = child_argv(
        spec, settings.min_num_envs, settings.iterations, Path("<scratch>/run"), Path("<scratch>/result.json")
    )
    print(f"# islab-train fit: one rank of {spec.task} with {spec.lib} on {spec.device}, at most "
          f"{len(sizes)} sizes ({', '.join(map(str, sizes))} envs), {settings.iterations} iteration(s) each; "
          "stops at the first size that does not fit")  # fmt: skip
    print(shlex.join(argv))


def fit_command(ctx: typer.Context, **options: Any) -> None:
    spec = resolve(ctx, options).spec
    if spec.entrypoint is not None:
        fail(SpecError(Issue("fit", "measures islab's own worker; a --script/--module/--command/--isaaclab entry point "
                             "is not supported yet", "Drop the entry point and give --task and --lib")))  # fmt: skip
    try:
        settings = settings_of(options, spec.num_envs)
    except SpecError as exc:
        fail(exc)
    if options["dry_run"]:
        print_dry_run(spec, settings)
        raise typer.Exit(0)
    table_stream = sys.stderr if options["json_output"] else sys.stdout
    print(f"islab-train fit: {spec.task} with {spec.lib} on {spec.device}, one rank of {spec.nproc_per_node} "
          f"per node, {settings.iterations} iteration(s) per size from {settings.min_num_envs} envs",
          file=sys.stderr, flush=True)  # fmt: skip

    def progress(row: Any) -> None:
        measured = f"{row.env_steps_per_s:,.0f} steps/s" if row.env_steps_per_s else row.note
        print(f"  {row.num_envs} envs: {format_bytes(row.peak_memory_bytes)}, {measured}", file=sys.stderr, flush=True)

    try:
        result = fit(spec, settings, on_row=progress)
    except FitError as error:
        print(f"error: fit: {error}", file=sys.stderr)
        raise typer.Exit(1) from None
    chosen = recommend(result.rows, result.memory_limit_bytes, result.memory_fraction)
    knee_row = knee(result.rows)
    if chosen.num_envs is not None:
        cache.store_result(spec, chosen.num_envs, result, settings)
    if options["json_output"]:
        print(to_json(result.device, result.memory_limit_bytes, result.memory_fraction, result.rows, result.stopped,
                      {"device_name": result.device_name, "seconds": round(result.seconds, 1)}))  # fmt: skip
    for line in format_table(result.rows):
        print(line, file=table_stream)
    print(f"stopped: {result.stopped} ({result.seconds:.0f} s)", file=table_stream)
    print(f"recommended: num_envs = {chosen.num_envs}: {chosen.reason}", file=table_stream)
    if knee_row is not None:
        print(f"knee: {knee_row.num_envs} envs already reach {knee_row.env_steps_per_s:,.0f} steps/s "
              "(90% of the best measured)", file=table_stream)  # fmt: skip
    raise typer.Exit(0 if chosen.num_envs is not None else 1)


fit_command.__signature__ = signature(train=False, own=FIT_OPTIONS)  # type: ignore[attr-defined]
FIT_HELP = ("Measure how many envs one rank's device holds: one rank at doubling --num-envs, peak memory and "
            "steps/s each; recommends the largest within --memory-fraction and shows the knee. "
            "Takes the same options as a launch.")  # fmt: skip
