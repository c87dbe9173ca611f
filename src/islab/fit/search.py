"""The edge of ``islab-train fit`` (torch-free): one child process per size, sizes doubling.

Each child is ``python -m islab.fit.child RESULT.json`` + the job's own worker arguments with
``--num-envs N --max-iterations K`` (:func:`islab.plan.plan.worker_args`: the same task, library,
agent config and overrides a launch would give its ranks), one rank alone, in a scratch run
directory, with the environment one rank of the job gets (the spec's ``env``, the library's fixes,
``OMP_NUM_THREADS`` of ``--nproc`` ranks sharing the cores). It runs in its own process group.

The parent reads the child's peak resident memory from ``os.wait4`` (the kernel's ``ru_maxrss``:
true even when the OOM killer ended the child) and the rest from ``RESULT.json``. Outcomes:

* exit 0: a row (GPU: the child's peak device memory; CPU: its peak RSS);
* exit :data:`islab.fit.child.OUT_OF_MEMORY_EXIT`, or killed by ``SIGKILL`` (what the OOM killer
  and a cgroup's limit send): a row that does not fit -- a data point, never a failure;
* past ``timeout_s``: the group is killed; a row that does not fit ("too slow");
* anything else: :class:`FitError` with the child's last log lines (a broken task or config is the
  user's to fix, not a size).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from islab.fit.child import OUT_OF_MEMORY_EXIT
from islab.fit.memory import cpu_rank_memory_bytes
from islab.fit.table import DEFAULT_MEMORY_FRACTION, FitRow, budget_bytes, format_bytes, stop_reason
from islab.plan.plan import plan_env, worker_args
from islab.plan.torchrun import ranks_env
from islab.rundir.records import read_json_object
from islab.spec.run_spec import RunSpec

CHILD_MODULE = "islab.fit.child"
LOG_TAIL_LINES = 15
# A rank's launcher variables in the parent's environment (fit started inside a job) would make
# the child think it is one of many ranks.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "JAX_RANK", "JAX_WORLD_SIZE")


class FitError(Exception):
    """A child failed for a reason that is not memory: the command stops and says why."""


DEFAULT_MIN_NUM_ENVS = 64
DEFAULT_ITERATIONS = 2  # steps/s is the last iteration's: the first pays for start-up
DEFAULT_CHILD_TIMEOUT_S = 600.0
MAX_GROWTH = 16  # default largest size: 16 x the job's num_envs


@dataclass(frozen=True)
class FitSettings:
    memory_fraction: float
    memory_limit_bytes: int | None  # --memory-limit; None: the device's
    min_num_envs: int
    max_num_envs: int
    iterations: int
    timeout_s: float


def default_settings(job_num_envs: int) -> FitSettings:
    """What ``fit`` measures with when given no options (also ``--num-envs auto``'s measurement)."""
    return FitSettings(DEFAULT_MEMORY_FRACTION, None, DEFAULT_MIN_NUM_ENVS, MAX_GROWTH * job_num_envs,
                       DEFAULT_ITERATIONS, DEFAULT_CHILD_TIMEOUT_S)  # fmt: skip


@dataclass
class FitResult:
    device: str
    memory_limit_bytes: int
    memory_fraction: float
    rows: list[FitRow] = field(default_factory=list)
    stopped: str = ""
    device_name: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class ChildOutcome:
    returncode: int  # negative: killed by that signal
    peak_rss_bytes: int
    result: dict
    log_tail: str
    timed_out: bool


def child_argv(spec: RunSpec, num_envs: int, iterations: int, run_dir: Path, result: Path) -> list[str]:
    sized = spec.model_copy(update={"num_envs": num_envs, "max_iterations": iterations, "total_env_steps": None,
                                    "resume": None, "logger": "tensorboard"})  # fmt: skip
    return [spec.python, "-m", CHILD_MODULE, str(result), *worker_args(sized, str(run_dir))]


def child_env(spec: RunSpec, base: Mapping[str, str]) -> dict[str, str]:
    env = {key: value for key, value in base.items() if key not in LAUNCHER_VARIABLES}
    env.update(plan_env(spec))
    if spec.device == "cpu":
        env.update(ranks_env(env, spec.nproc_per_node))
    return env


def run_child(argv: list[str], env: Mapping[str, str], work: Path, timeout_s: float) -> ChildOutcome:
    """Start the child in its own process group, wait for it with ``wait4`` (its peak RSS), kill
    the group after ``timeout_s``."""
    log_path = work / "child.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    timed_out = threading.Event()

    def kill_group() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill_group)
    timer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    with contextlib.suppress(ProcessLookupError):  # what the child started (compile workers ...) goes with it
        os.killpg(process.pid, signal.SIGKILL)
    result_path = work / "result.json"
    result = read_json_object(result_path) if result_path.exists() else {}
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return ChildOutcome(process.returncode, usage.ru_maxrss * 1024, result or {}, "\n".join(lines[-LOG_TAIL_LINES:]),
                        timed_out.is_set())  # fmt: skip


def row_of(num_envs: int, outcome: ChildOutcome, device: str, budget: int, timeout_s: float) -> FitRow:
    """One child's outcome as a row, or :class:`FitError` when it failed for another reason."""
    gpu = outcome.result.get("gpu") or {}
    peak = gpu.get("peak_bytes") if device == "cuda" else outcome.peak_rss_bytes
    if outcome.timed_out:
        return FitRow(num_envs, peak, None, fits=False, note=f"did not finish within {timeout_s:.0f} s")
    if outcome.returncode == OUT_OF_MEMORY_EXIT and outcome.result.get("out_of_memory"):
        return FitRow(
            num_envs, peak, None, fits=False, out_of_memory=True, note=f"out of memory ({outcome.result['error']})"
        )
    if outcome.returncode == -signal.SIGKILL:
        return FitRow(num_envs, peak, None, fits=False, out_of_memory=True,
                      note="killed by SIGKILL: the kernel's out-of-memory killer or a cgroup memory limit")  # fmt: skip
    if outcome.returncode != 0:
        raise FitError(f"the child at {num_envs} envs failed (exit status {outcome.returncode}), not for lack of "
                       f"memory; its last lines:\n{outcome.log_tail}")  # fmt: skip
    rate = outcome.result.get("env_steps_per_s")
    fits = peak is not None and peak <= budget
    note = "" if fits else f"peak {format_bytes(peak)} over the budget of {format_bytes(budget)}"
    return FitRow(num_envs, peak, rate, fits=fits, note=note)


def device_limit(spec: RunSpec, settings: FitSettings, first: ChildOutcome | None) -> int:
    """The memory one rank may use: ``--memory-limit``; a GPU's total (NVML's, else torch's) once a
    child has reported it; a CPU rank's share of RAM / the cgroup limit."""
    if settings.memory_limit_bytes is not None:
        return settings.memory_limit_bytes
    if spec.device == "cuda":
        gpu = (first.result.get("gpu") or {}) if first is not None else {}
        return int(gpu.get("nvml_total") or gpu.get("total_memory") or 0)
    return cpu_rank_memory_bytes(spec.nproc_per_node)


def fit(
    spec: RunSpec, settings: FitSettings, *, environ: Mapping[str, str] | None = None,
    on_row: Callable[[FitRow], None] = lambda row: None,
) -> FitResult:  # fmt: skip
    """Measure sizes ``min_num_envs, 2x, 4x, ...`` until one does not fit, the next is predicted not
    to, throughput stops growing, or ``max_num_envs``."""
    started = time.monotonic()
    env = child_env(spec, os.environ if environ is None else environ)
    limit = device_limit(spec, settings, None) if spec.device == "cpu" or settings.memory_limit_bytes else 0
    result = FitResult(spec.device, limit, settings.memory_fraction)
    num_envs = settings.min_num_envs
    with tempfile.TemporaryDirectory(prefix="islab-fit-") as scratch:
        while True:
            work = Path(scratch) / f"envs_{num_envs}"
            work.mkdir()
            argv = child_argv(spec, num_envs, settings.iterations, work / "run", work / "result.json")
            outcome = run_child(argv, env, work, settings.timeout_s)
            if not result.memory_limit_bytes:
                result.memory_limit_bytes = device_limit(spec, settings, outcome)
                result.device_name = str((outcome.result.get("gpu") or {}).get("name", ""))
            budget = budget_bytes(result.memory_limit_bytes, settings.memory_fraction)
            if not result.memory_limit_bytes:  # a GPU child died before it could say how large its device is
                budget = 2**62
            row = row_of(num_envs, outcome, spec.device, budget, settings.timeout_s)
            result.rows.append(row)
            on_row(row)
            reason = stop_reason(result.rows, budget, settings.max_num_envs)
            if reason is not None:
                result.stopped = reason
                break
            num_envs *= 2
    result.seconds = time.monotonic() - started
    return result
