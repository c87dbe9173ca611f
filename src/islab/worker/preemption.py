"""Stop every rank at the same iteration when the job is preempted (:mod:`islab.spec.stopping`).

A signal reaches the ranks at different moments (torchrun forwards it, SLURM signals every
process, islab-train signals the ranks it tracks), so the handler only notes it. After every
iteration the ranks combine their notes with one collective (:meth:`StopRequest.agreed`: the
largest signal number, 0 for none); when any rank was signalled, all of them stop after that same
iteration -- the checkpointer writes the checkpoint first (a collective too) and raises
:class:`Preempted`, which ends the library's training loop on every rank.
"""

from __future__ import annotations

import signal
from typing import Any

from islab.spec.stopping import PREEMPT_SIGNALS
from islab.worker.collectives import Collective


class Preempted(BaseException):
    """Raised on every rank after the checkpoint of the iteration they agreed to stop at.
    A BaseException: no library's ``except Exception`` may swallow it, and torch's ``record``
    writes no error file for it (it is no failure)."""

    def __init__(self, signum: int, iteration: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name} after iteration {iteration}")
        self.signum = signum
        self.iteration = iteration

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


class StopRequest:
    """The preempting signal this rank received (if any), and the ranks' agreement on it."""

    def __init__(self) -> None:
        self.signum = 0

    def install(self) -> StopRequest:
        for signum in PREEMPT_SIGNALS:
            signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Several copies arrive (torchrun's forward, SLURM's, islab-train's): the first one counts.
        self.signum = self.signum or signum

    def agreed(self, collective: Collective) -> int:
        """Collective (every rank, once per iteration): the signal some rank received, else 0."""
        return collective.max_int(self.signum)
