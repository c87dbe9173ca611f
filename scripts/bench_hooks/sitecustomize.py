"""Benchmark probe for islab worker ranks; active only when this folder is on PYTHONPATH.

``scripts/bench.py`` launches the real ``islab-train`` with ``PYTHONPATH=scripts/bench_hooks`` and
``ISLAB_BENCH_TIMINGS=<dir>``. Python imports ``sitecustomize`` at start-up in every process of
the job (launcher, torchrun, ranks); only worker ranks (``python -m islab.worker`` or the worker
script run by skrl's JAX launcher) install the probe, everything else is left untouched, so the
launcher still never imports torch. Ranks torchrun forks from its agent (``--run-path`` with the
worker's file: islab-train's CPU launches) start no interpreter of their own: the agent has the
probe installed in each child it forks. See ``_islab_bench_probe`` for what is timed.
"""

from __future__ import annotations

import os
import sys


def _forks_worker_ranks(argv: list[str]) -> bool:
    """torchrun's agent running our worker's file in ranks it forks (``--run-path``)."""
    return "--run-path" in argv and any(item.replace("\\", "/").endswith("islab/worker/__main__.py") for item in argv)


def _is_worker_rank(argv: list[str]) -> bool:
    for index, item in enumerate(argv[1:], start=1):
        if item == "-m":
            return argv[index + 1 : index + 2] == ["islab.worker"]
        if not item.startswith("-"):
            return item.replace("\\", "/").endswith("islab/worker/__main__.py")
    return False


_ARGV = list(getattr(sys, "orig_argv", []))
if os.environ.get("ISLAB_BENCH_TIMINGS") and _is_worker_rank(_ARGV):
    import _islab_bench_probe

    _islab_bench_probe.install(os.environ["ISLAB_BENCH_TIMINGS"])
elif os.environ.get("ISLAB_BENCH_TIMINGS") and _forks_worker_ranks(_ARGV):

    def _install_in_rank() -> None:
        import _islab_bench_probe

        _islab_bench_probe.install(os.environ["ISLAB_BENCH_TIMINGS"])

    os.register_at_fork(after_in_child=_install_in_rank)
