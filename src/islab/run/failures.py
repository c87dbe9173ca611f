"""Naming a failure: which rank, how it ended, where its log is -- shared by both launchers.

Pure functions over text and the run directory's rank logs (``<run_dir>/logs/rank_<R>.log``);
:mod:`islab.plan.torchrun` and :mod:`islab.plan.skrl_jax` build their messages from them.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Sequence

from islab.preflight.triage import triage
from islab.run.console import route_line
from islab.rundir import rank_log, rank_logs

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
_PEER_LOST = re.compile(r"Connection closed by peer|Connection reset by peer|remote worker crashing", re.IGNORECASE)


def lost_peer(exception: str | None) -> bool:
    """Is this exception only a consequence of another rank's end (gloo's "Connection reset /
    closed by peer")? Such a rank is never the root cause, whatever its timestamp says."""
    return bool(exception and _PEER_LOST.search(exception))


def log_tail(run_dir: str, rank: int, lines: int = 15) -> list[str]:
    """The last lines of ``<run_dir>/logs/rank_<rank>.log`` (empty when it does not exist)."""
    try:
        text = rank_log(run_dir, rank).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.rstrip("\n").splitlines()[-lines:]


def failed_ranks_from_logs(run_dir: str) -> list[int]:
    """Ranks whose ``<run_dir>/logs/rank_<R>.log`` contains a Python traceback."""
    ranks = []
    for log in rank_logs(run_dir):
        match = re.fullmatch(r"rank_(\d+)\.log", log.name)
        if not match:
            continue
        with contextlib.suppress(OSError):
            if "Traceback (most recent call last)" in log.read_text(encoding="utf-8", errors="replace"):
                ranks.append(int(match.group(1)))
    return sorted(ranks)


def last_exception_line(lines: Sequence[str]) -> str | None:
    """The last line of the last Python traceback in ``lines`` (``RuntimeError: boom``), or None.

    That is the first line after ``Traceback (most recent call last):`` that is not indented
    (frames and source lines are); ``[default<L>]:`` prefixes from ``torchrun --tee`` and the
    ``[rank<R>]:`` prefixes torch puts on a failed collective's traceback are removed."""
    text = _plain(lines)
    starts = [index for index, line in enumerate(text) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    for line in text[starts[-1] + 1 :]:
        if line.strip() and not line[0].isspace():
            return line.strip()
    return None


_CHAIN_LINKS = ("During handling of the above exception", "The above exception was the direct cause")
TRACEBACK_SEARCH_LINES = 2000  # the end of a failed rank's log searched for its last traceback
TAIL_SHOWN = 15  # a rank that ended without a traceback (killed): its last lines, the one clue


def _plain(lines: Sequence[str]) -> list[str]:
    """Lines as the rank printed them: torchrun's ``[default<L>]:`` and torch's ``[rank<R>]:`` gone."""
    return [_RANK_PREFIX.sub("", route_line(line, 0)[1].rstrip("\n"), count=1) for line in lines]


def last_traceback(lines: Sequence[str]) -> list[str]:
    """The last Python traceback in ``lines``, whole: its ``Traceback (most recent call last):``
    line, every frame, the exception line and the message lines after it -- with the exceptions it
    was raised from or while handling (Python prints those first, joined by "During handling of the
    above exception ..."). Prefixes removed as in :func:`last_exception_line`; [] without one."""
    text = _plain(lines)
    starts = [index for index, line in enumerate(text) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return []
    first = starts[-1]
    for earlier in reversed(starts[:-1]):  # a chained exception: the link line sits just above
        between = [line for line in text[earlier:first] if line.strip()]
        if not between or not between[-1].startswith(_CHAIN_LINKS):
            break
        first = earlier
    end = starts[-1] + 1
    while end < len(text) and (not text[end].strip() or text[end][0].isspace()):  # frames and source lines
        end += 1
    end += 1  # the exception line; then its message's further lines, up to a blank line
    while end < len(text) and text[end].strip():
        end += 1
    return [line for line in text[first:end]]


def suspected_overrides(traceback: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """The agent-config overrides that are likely the traceback's cause: the key's last part is a name
    in it, in the failing source lines or the message (``algorithm.num_mini_batches=0`` ->
    ``batch_size // num_mini_batches``; "learning rate" counts for ``learning_rate``), or the value
    is a word of the exception line (``algorithm.learning_rate=-1`` -> "Invalid learning rate: -1";
    not a lone digit, which too many messages hold)."""
    text = "\n".join(traceback)
    raised = next((line for line in reversed(traceback) if line.strip() and not line[0].isspace()), "")
    found = []
    for override in overrides:
        key, _, value = override.partition("=")
        name = key.rsplit(".", 1)[-1]
        spelled = r"[_ ]".join(re.escape(part) for part in name.split("_"))
        named = bool(name) and re.search(rf"(?<![\w]){spelled}(?![\w])", text) is not None
        valued = len(value.strip()) > 1 and re.search(rf"(?<![\w.-]){re.escape(value.strip())}(?![\w.])", raised)
        if named or valued:
            found.append(override)
    return found


def failed_rank_lines(
    rank: int, log: str, lines: Sequence[str], overrides: Sequence[str], *, shown: bool, clueless: bool
) -> str:
    """What the console prints above the error line of the rank that failed: its last traceback,
    whole, or, when it has none and the error line cannot say how it ended (``clueless``: no
    exception, no signal), its last lines -- unless the console showed every line of every rank
    already (``shown``: ``--all-ranks``); then the agent-config override the traceback points at."""
    traceback = last_traceback(lines)
    out = []
    if traceback and not shown:
        out.append(f"  rank {rank}'s traceback ({log}):")
        out += [f"    {line}" for line in traceback]
    elif lines and clueless and not shown:
        out.append(f"  last lines of {log}:")
        out += [f"    {line.rstrip()}" for line in _plain(lines)[-TAIL_SHOWN:]]
    for override in suspected_overrides(traceback, overrides):
        key = override.partition("=")[0]
        out.append(
            f"  likely cause: the agent-config override {override} ({key.rsplit('.', 1)[-1]} is in the failing "
            f"code); check its value, or leave it out to use the task's agent config"
        )
    return "".join(f"{line}\n" for line in out)


def describe_end(exit_code: int | None, exception: str | None) -> str:
    """How a rank ended, for the error line: its exception, or the signal that killed it."""
    if exception:
        return f" with {exception}"
    signum = None if exit_code is None else signal_of(exit_code)
    if signum is None:
        return ""
    # a negative code is Popen's "killed by"; above 128 it may also be the process's own exit code
    return (
        f", killed by {signal_name(signum)}"
        if exit_code < 0
        else f" (exit code {exit_code}, signal {signal_name(signum)}?)"
    )


def cause_named(exit_code: int | None, exception: str | None) -> bool:
    """Does the error line say what ended the rank: its exception, or the signal that killed it?
    Only when it does not is the rank's last output printed above it, as the one clue on the
    console (its log keeps every line either way)."""
    return bool(exception) or (exit_code is not None and signal_of(exit_code) is not None)


def signal_of(code: int) -> int | None:
    """The signal that ended a process, from Popen's returncode (-N) or a shell exit status (128 + N)."""
    if code < 0:
        return -code
    return code - 128 if code > 128 else None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def rendezvous_message(address: str | None, timeout_s: float) -> str:
    """The one-line error for nodes that did not arrive within ``timeout_s`` at ``address`` (a plan's
    ``rendezvous_address`` and ``rendezvous_timeout_s``; plain values, so naming a failure needs no plan)."""
    where = address or "the rendezvous address"
    return (
        f"error: rendezvous: node(s) did not join within {timeout_s} s at {where}; "
        f"check that every node runs islab-train with the same spec and can reach {where} (islab-train doctor)"
    )


TRIAGE_LINES = 400  # the last lines of each rank log searched for known collective failures


def known_failure_lines(run_dir: str, launcher_lines: Sequence[str] = ()) -> list[str]:
    """The known collective failures (:data:`islab.preflight.triage.KNOWN_FAILURES`: an NCCL WARN, a
    watchdog timeout, gloo's missing interface ...) found in the launcher's last lines and the end
    of every rank log, each as ``likely cause: <what>. Fix: <fix>`` -- the pre-flight's triage, for a
    failure during training."""
    lines = list(launcher_lines)
    for log in rank_logs(run_dir):
        match = re.fullmatch(r"rank_(\d+)\.log", log.name)
        if match:
            lines += log_tail(run_dir, int(match.group(1)), lines=TRIAGE_LINES)
    return [f"  likely cause ({found.name}): {found.what}. Fix: {found.fix}" for found in triage(lines)]
