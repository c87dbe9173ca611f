"""Run a module as ``python -m`` would, then end the process without the interpreter's teardown.

    python -m islab.preflight.quick_exit [--import MODULE]... -m torch.distributed.run [torchrun's options and program]

A process that imported torch spends seconds in Python's finalization after its work is done
(tearing down torch's modules and objects: 3.3 s measured for torchrun on this project's 2-core
machine under load, every second of it waited for by the pre-flight). The pre-flight's
processes hold nothing that needs it: torchrun has stopped its workers, its log tails and its
rendezvous by the time its ``main`` returns, and a skrl-JAX probe rank has destroyed its process
group and printed its last line (a probe rank torchrun forked returns to torchrun instead). So
they end with :func:`end`: the ``atexit`` handlers run (torchrun's temporary files, logging's
flush), the streams are flushed, then ``os._exit`` with the status the module gave. ``islab-train
sweep`` ends the same way once Ray is stopped and its outputs are written (the teardown of Ray's
core worker, ~1 s).

``--import MODULE`` imports a module before the run, so that ranks torchrun forks from this
process find it imported (islab.plan.torchrun, "Forked ranks"): an RL library's import costs a
rank 1.5-4.5 s of CPU (rl_games and rsl_rl pull in ``torch._dynamo``), paid once here instead of
once per rank. An import that fails is left to the ranks, which import the module again and say
why in their own logs.

A failing module reads the same as under ``python -m``: an exception's traceback goes to stderr
(``sys.excepthook``) and the status is 1; a ``KeyboardInterrupt`` is left to the interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import runpy
import sys
from collections.abc import Sequence
from typing import NoReturn


def exit_status(code: object) -> int:
    """``SystemExit.code`` as the interpreter turns it into a status (a message is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def end(status: int) -> NoReturn:
    """Run the ``atexit`` handlers, flush, and leave with ``status`` -- no module teardown."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more reaches the reader
            stream.flush()
    os._exit(status)


def main(argv: Sequence[str]) -> None:
    argv = list(argv)
    while len(argv) >= 2 and argv[0] == "--import":
        with contextlib.suppress(Exception):  # the ranks import it again and report the failure
            importlib.import_module(argv[1])
        argv = argv[2:]
    if len(argv) < 2 or argv[0] != "-m":
        print("usage: python -m islab.preflight.quick_exit [--import MODULE]... -m MODULE [ARGS...]", file=sys.stderr)
        end(2)
    module = argv[1]
    sys.argv = [module, *argv[2:]]  # runpy puts the module's file in sys.argv[0], as -m does
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        end(exit_status(stop.code))
    except Exception:  # torchrun's ChildFailedError, a rendezvous timeout, ...: as the interpreter says them
        sys.excepthook(*sys.exc_info())
        end(1)
    end(0)


if __name__ == "__main__":
    main(sys.argv[1:])
