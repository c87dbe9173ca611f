"""Benchmark probe for islab worker ranks; active only when this folder is on PYTHONPATH.

``scripts/bench.py`` launches the real ``islab-train`` with ``PYTHONPATH=scripts/bench_hooks`` and
``ISLAB_BENCH_TIMINGS=<dir>``. Python imports ``sitecustomize`` at start-up in every process of
the job (launcher, torchrun, ranks); only worker ranks (``python -m islab.worker`` or the worker
script run by skrl's JAX launcher) install the probe, everything else is left untouched, so the
launcher still never imports torch. See ``_islab_bench_probe`` for what is timed.
"""

from __future__ import annotations

import os
import sys


def _is_worker_rank(argv: list[str]) -> bool:
    for index, item in enumerate(argv[1:], start=1):
        if item == "-m":
            return argv[index + 1 : index + 2] == ["islab.worker"]
        if not item.startswith("-"):
            return item.replace("\\", "/").endswith("islab/worker/__main__.py")
    return False


if os.environ.get("ISLAB_BENCH_TIMINGS") and _is_worker_rank(list(getattr(sys, "orig_argv", []))):
    import _islab_bench_probe

    _islab_bench_probe.install(os.environ["ISLAB_BENCH_TIMINGS"])
