"""Running skrl-JAX's ranks ourselves: the node runner and the JAX rendezvous watch.

skrl's JAX launcher exits 0 even when a rank fails and hangs when a peer dies, so a real launch starts
the ranks of :func:`islab.plan.skrl_jax.rank_envs` itself (:class:`SkrlJaxNode`), watches them and stops
the others at the first failure. ``jax.distributed.initialize`` waits for every process and skrl calls it
at import without a timeout, so :class:`JaxRendezvousWatch` enforces ``rendezvous.timeout_s`` from the
ranks' output.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from islab.run.failures import (
    TRACEBACK_SEARCH_LINES,
    cause_named,
    describe_end,
    failed_rank_lines,
    last_exception_line,
    lost_peer,
    rendezvous_message,
    signal_of,
)
from islab.run.processes import Child, Outcome
from islab.run.torchrun_node import error_file_failures
from islab.rundir import rank_log

if TYPE_CHECKING:
    from islab.plan.launch_plan import LaunchPlan, NodePlan


# skrl logs these around its jax.distributed.initialize call (skrl/__init__.py, skrl 2.1.x): the
# first just before it, one of the others right after it returns.
JAX_JOINING = "[skrl:INFO] Distributed (rank:"
JAX_JOINED = ("Using device local to process", "Failed to get the device local to process")


class JaxRendezvousWatch:
    """When did each rank start waiting in ``jax.distributed.initialize``, and has it returned?

    ``jax.distributed.initialize`` waits up to 300 s for every process and skrl calls it at import
    without a timeout argument, so the supervisor enforces ``rendezvous.timeout_s`` itself: a rank
    that logged :data:`JAX_JOINING` but none of :data:`JAX_JOINED` within the timeout means a node
    did not arrive. Fed line by line from the output pumps (other threads); read by the poll loop.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.waiting_since: dict[int, float] = {}
        self.joined: set[int] = set()

    def observe(self, rank: int, line: str) -> None:
        if rank in self.joined:
            return
        if JAX_JOINING in line:
            self.waiting_since.setdefault(rank, self.clock())
        elif any(marker in line for marker in JAX_JOINED):
            self.joined.add(rank)

    def waiting(self, rank: int) -> bool:
        return rank in self.waiting_since and rank not in self.joined

    def timed_out(self, timeout_s: float) -> int | None:
        """A rank that has waited longer than ``timeout_s``, or None."""
        now = self.clock()
        for rank, since in list(self.waiting_since.items()):
            if rank not in self.joined and now - since > timeout_s:
                return rank
        return None


class SkrlJaxNode:
    """The node's ranks, started directly: the first one that fails stops the others and fails the
    run with a message naming it; a rank stuck in the rendezvous past the timeout does too."""

    fail_fast = True

    def __init__(self, plan: LaunchPlan, node: NodePlan) -> None:
        self.plan = plan
        self.node = node
        self.rendezvous = JaxRendezvousWatch()
        # The worker's @record writes a raising rank's exception where TORCHELASTIC_ERROR_FILE says.
        self.error_dir = tempfile.mkdtemp(prefix="islab-skrl-jax-")

    def error_file(self, local_rank: int) -> str:
        return os.path.join(self.error_dir, "run", "attempt_0", str(local_rank), "error.json")

    def children(self) -> list[Child]:
        children = []
        for rank in self.node.ranks:
            Path(self.error_file(rank.local_rank)).parent.mkdir(parents=True, exist_ok=True)
            env = {**rank.env, "TORCHELASTIC_ERROR_FILE": self.error_file(rank.local_rank)}
            children.append(Child(rank.argv, env, rank=rank.global_rank, stderr_to_stdout=True,
                                  tail_lines=TRACEBACK_SEARCH_LINES))  # fmt: skip
        return children

    def observe(self, rank: int | None, line: str) -> None:
        if rank is not None:
            self.rendezvous.observe(rank, line)

    def overdue(self) -> bool:
        return self.rendezvous.timed_out(self.plan.rendezvous_timeout_s) is not None

    def explain(self, outcome: Outcome, err: IO[str], *, all_ranks: bool) -> int:
        failed = outcome.first_failed
        if outcome.overdue or (failed is not None and self.rendezvous.waiting(self.node.ranks[failed].global_rank)):
            err.write(rendezvous_message(self.plan.rendezvous_address, self.plan.rendezvous_timeout_s) + "\n")
            return outcome.statuses[failed] if failed is not None else 1
        if failed is None:
            return 0
        raised = dict(error_file_failures(self.error_dir))

        def exception_of(index: int) -> str | None:
            return raised.get(self.node.ranks[index].local_rank) or last_exception_line(list(outcome.tails[index]))

        failed = _root_cause(failed, outcome.statuses, exception_of)
        rank, status = self.node.ranks[failed], outcome.statuses[failed]
        lines = list(outcome.tails[failed])
        exception = exception_of(failed)
        log = rank_log(self.plan.run_dir, rank.global_rank)
        err.write(failed_rank_lines(rank.global_rank, str(log), lines, self.plan.overrides, shown=False,
                                    clueless=not cause_named(status, exception)))  # fmt: skip
        # "RuntimeError: boom", or 137 -> -9 -> "killed by SIGKILL"
        signum = signal_of(status)
        how = f": {exception}" if exception else describe_end(-signum if signum else status, None)
        err.write(
            f"error: rank {rank.global_rank} (node {self.node.node_rank}, local rank {rank.local_rank}) "
            f"exited with code {status}{how}; the other ranks were stopped. See {log}. "
            f"Run directory: {self.plan.run_dir}\n"
        )
        return status

    def close(self) -> None:
        shutil.rmtree(self.error_dir, ignore_errors=True)


def _root_cause(first: int, statuses: Sequence[int | None], exception_of: Callable[[int], str | None]) -> int:
    """The rank to blame: the first one seen failing, unless all it reports is a lost peer (gloo's
    "Connection reset by peer" when another rank died); then a rank that raised something else, or
    one killed by a signal we did not send (we stop the others with SIGTERM)."""
    if not lost_peer(exception_of(first)):
        return first
    for index, status in enumerate(statuses):
        if index == first or not status:
            continue
        exception = exception_of(index)
        killed_by = signal_of(status)
        if (exception and not lost_peer(exception)) or (killed_by not in (None, signal.SIGTERM) and not exception):
            return index
    return first
