"""``--num-envs auto`` on a launch: ``fit``'s recommendation for this job's shape.

The word ``auto`` is taken off the command line (``--num-envs auto`` / ``--num-envs=auto``) or the
environment (``ISLAB_NUM_ENVS=auto``) before the options are parsed (:func:`take_auto`) -- a cluster file's
``num_envs: auto`` is taken off by resolution (:func:`islab.resolve.steps.take_file_auto`) -- so
resolution sees no ``num_envs`` and proceeds as usual; then :func:`apply_auto` puts the
recommendation in the resolved spec with source ``fit`` and says where it came from -- ``cached
<when>, <file>`` (:mod:`islab.fit.cache`) or ``measured now`` -- which the dry run's field list
prints (``num_envs = 8192  (source: fit, cached ...)``). A dry run never measures: without a cached
value it keeps the task's default and says that a launch measures first. A real launch without one
runs ``fit`` with its defaults on this node before anything starts, and caches the result.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from islab.fit import cache
from islab.fit.search import FitError, default_settings, fit
from islab.fit.table import recommend
from islab.resolve.layers import Source
from islab.resolve.resolved import ResolvedSpec
from islab.spec.fields import NUM_ENVS_AUTO
from islab.spec.issues import Issue, SpecError

AUTO = NUM_ENVS_AUTO
FLAG = "--num-envs"
VARIABLE = "ISLAB_NUM_ENVS"


def take_auto(args: list[str]) -> tuple[list[str], bool]:
    """``args`` without ``--num-envs auto`` (either spelling), and whether it was there."""
    kept: list[str] = []
    found = False
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            kept += args[index:]
            break
        if arg == FLAG and index + 1 < len(args) and args[index + 1] == AUTO:
            found, index = True, index + 2
            continue
        if arg == f"{FLAG}={AUTO}":
            found, index = True, index + 1
            continue
        kept.append(arg)
        index += 1
    return kept, found


@contextmanager
def environment_auto_taken() -> Iterator[bool]:
    """While the options are parsed, ``ISLAB_NUM_ENVS=auto`` is out of the environment (the option
    is a number); yields whether it was set, and puts it back afterwards."""
    value = os.environ.get(VARIABLE)
    if value != AUTO:
        yield False
        return
    del os.environ[VARIABLE]
    try:
        yield True
    finally:
        os.environ[VARIABLE] = value


def apply_auto(resolved: ResolvedSpec, *, dry_run: bool, warnings: list[str] | None = None) -> ResolvedSpec:
    """The resolved spec with ``num_envs`` from the cache or a measurement (source ``fit``)."""
    spec = resolved.spec
    if spec.entrypoint is not None:
        raise SpecError(Issue("--num-envs auto", "is measured with islab's own worker; this job runs an entry point",
                              "Give a number (--num-envs 4096) or pass your script's own flag after --"))  # fmt: skip
    if spec.resume is not None:
        raise SpecError(Issue("--num-envs auto", "cannot change the env count of a run being resumed",
                              "Drop --num-envs; --resume keeps the run's own num_envs"))  # fmt: skip
    hit = cache.lookup(spec)
    if hit is not None:
        num_envs, path, when = hit
        origin = f"cached {when}, {path}"
    elif dry_run:
        num_envs, origin = spec.num_envs, "not measured yet: a launch runs islab-train fit first, then caches it"
        if warnings is not None:
            warnings.append(f"--num-envs auto: nothing cached for this job yet; the plan shows {num_envs}, a launch "
                            "measures the real value first (islab-train fit)")  # fmt: skip
    else:
        num_envs, origin = measure(resolved)
    changed = spec.model_copy(update={"num_envs": num_envs})
    return dataclasses.replace(
        resolved, spec=changed, sources={**resolved.sources, "num_envs": Source.FIT},
        origins={**resolved.origins, "num_envs": origin},
    )  # fmt: skip


def measure(resolved: ResolvedSpec) -> tuple[int, str]:
    spec = resolved.spec
    settings = default_settings(spec.num_envs)  # what `islab-train fit` measures with no options
    print(f"islab-train: --num-envs auto: measuring {spec.task} on {spec.device} with islab-train fit "
          "(once; the result is cached)", file=sys.stderr, flush=True)  # fmt: skip
    try:
        result = fit(spec, settings)
    except FitError as error:
        raise SpecError(
            Issue("--num-envs auto", f"the measurement failed: {error}", "Fix the job, or give --num-envs N")
        ) from None
    chosen = recommend(result.rows, result.memory_limit_bytes, result.memory_fraction)
    if chosen.num_envs is None:
        raise SpecError(Issue("--num-envs auto", chosen.reason, "Give --num-envs N"))
    path = cache.store_result(spec, chosen.num_envs, result, settings)
    print(f"islab-train: --num-envs auto: {chosen.num_envs} ({chosen.reason}; {result.seconds:.0f} s)",
          file=sys.stderr, flush=True)  # fmt: skip
    return chosen.num_envs, f"measured now, cached in {path}"
