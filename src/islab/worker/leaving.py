"""How a rank ends: leaving the process group together, and ending the process without gloo's teardown.

A rank is started one of two ways, and ends accordingly:

* **its own interpreter** (``python -m islab.worker``, or skrl's JAX launcher running the file): a
  gloo rank flushes what an interpreter exit would write and leaves with ``os._exit`` (the
  interpreter's teardown of gloo races with the peers' and sometimes aborts);
* **forked from torchrun's agent** (``--run-path --start-method fork``: CPU ranks,
  islab.plan.torchrun, "Forked ranks"): it starts with the agent's signal handlers, which it sets
  back to Python's defaults, and ends through torchrun's process wrapper, which waits for the rank's
  return value (``SystemExit(0)`` counts as one) and then leaves with ``os._exit`` -- no atexit
  handler and no buffered TensorBoard event is written unless the rank writes it first
  (:func:`flush_for_exit`, on every path).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys


def forked_from_agent() -> bool:
    """Was this rank forked from torchrun's agent (``--start-method fork``) rather than started as
    its own interpreter?"""
    return multiprocessing.parent_process() is not None


def default_signal_handlers() -> None:
    """The handlers a new interpreter starts with. A forked rank inherits torchrun's agent's, which
    turn SIGTERM/SIGINT/SIGHUP/SIGQUIT into its own exception: a rank stopped before training
    (blocked in the rendezvous, say) must die of the signal, as a rank started by exec does."""
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def leave_process_group_together(code: int) -> None:
    """Wait for every rank before anyone closes its connections; on gloo, then end the process
    (a rank forked from torchrun's agent returns instead: its wrapper ends it without teardown).

    Ranks finish their last iteration at slightly different times. A rank that exits while a slower
    peer still has gloo traffic in flight can make that peer's transport throw inside a C++ thread,
    which aborts it (SIGABRT) and fails a run whose training had completed; the barrier costs one
    round trip. Even after it, gloo's own teardown (destroy_process_group, or the interpreter's at
    exit) races with the peer's and sometimes aborts ("terminate called without an active
    exception", pytorch/gloo#168). Everything of the run is on disk by now, so a gloo rank flushes
    what is still buffered and leaves with ``code`` without tearing gloo down.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    if dist.get_backend() == "gloo":
        if forked_from_agent():  # the worker's main flushes on its way out, on every path
            raise SystemExit(code)  # torchrun's wrapper takes SystemExit(0) as the rank's return
        flush_for_exit()
        os._exit(code)


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def flush_for_exit() -> None:
    """What a normal interpreter exit would still write: the libraries' TensorBoard event writers
    (buffered, flushed every few seconds by a thread), the atexit handlers (logging's, a profiler's
    dump...), and our output. Only the interpreter's finalization, where gloo tears down, is skipped."""
    import atexit
    import gc

    for obj in gc.get_objects():
        if type(obj).__name__ == "SummaryWriter" and callable(getattr(obj, "close", None)):
            with contextlib.suppress(Exception):
                obj.close()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
