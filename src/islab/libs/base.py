"""The one small interface every RL library sits behind.

The worker does not know which library trains; it builds an adapter and calls ``train``. Each
adapter translates our environment into the library's env interface, the agent config into the
library's objects, and reports what happened in a ``TrainResult``.

For checkpoints and resume (the format lives in ``islab.worker.checkpoint``) an adapter also provides
``library_state()`` / ``load_library_state()`` (everything the library needs to continue:
model, optimizer, normalizers, its own counters and learning-rate state, as tensors and
primitives) and keeps ``iteration``, the number of training iterations completed, which
``train(n)`` continues from: after a resume at N, ``train(M)`` runs iterations N+1 .. N+M.

The dependency points one way: the worker imports the libraries, not the other way round. What
the worker adds after every iteration (the islab checkpoint, test fault injection) is handed to
the adapter as hooks (``checkpointer``, ``iteration_hooks``); the rank's ``RankContext`` is only
a type here.
"""

from __future__ import annotations

import hashlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from islab.envs.base import DirectRLEnv
from islab.rundir import ProgressWriter

if TYPE_CHECKING:
    from islab.worker.context import RankContext

IterationHook = Callable[["LibraryAdapter", int, int], None]  # (adapter, iteration, max_iterations)


class IterationCheckpointer(Protocol):
    """What the adapter calls after each iteration to write a checkpoint when one is due
    (``islab.worker.checkpoint.Checkpointer``)."""

    def on_iteration(self, adapter: LibraryAdapter, iteration: int, final_iteration: int) -> None: ...


@dataclass
class TrainResult:
    iterations: int
    env_steps: int  # summed over all ranks
    wall_s: float
    mean_return: float | None  # mean episode return over the last iteration(s), this rank
    checkpoint: str | None  # rank 0's final checkpoint

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LibraryAdapter(ABC):
    """Build from (RankContext, env, agent config, run dir); train; save/load; expose the policy."""

    name: str

    def __init__(self, ctx: RankContext, env: DirectRLEnv, agent_cfg: dict[str, Any], run_dir: Path) -> None:
        self.ctx = ctx
        self.env = env
        self.agent_cfg = agent_cfg
        self.run_dir = Path(run_dir)
        self._progress_start = time.perf_counter()
        self._last_report: tuple[float, int] | None = None
        self.iteration = 0  # training iterations completed; restored on resume
        # Env steps of all ranks since the run began, across resumes: the start of this job's count
        # (restored on resume) and where it stands (written into checkpoints, the loggers' step axis).
        self.job_env_steps_at_start = 0
        self.job_env_steps = 0
        self.last_progress: dict[str, Any] | None = None  # rank 0: the record of the latest iteration
        self.checkpointer: IterationCheckpointer | None = None  # set by the worker; writes islab checkpoints
        self.iteration_hooks: list[IterationHook] = []  # set by the worker; run after the checkpointer
        self._progress = ProgressWriter(self.run_dir)

    def report_iteration(
        self,
        iteration: int,
        max_iterations: int,
        env_steps: int,
        mean_return: float | None,
        losses: Mapping[str, float] | None = None,
    ) -> None:
        """Call on every rank after each training iteration (1-based; ``env_steps``: all ranks,
        cumulative since this job started). Rank 0 appends it to ``progress.jsonl`` for the
        launcher's live display, with ``job_env_steps`` (counted across resumes) and the library's
        ``losses`` of the iteration where the adapter has them cheaply (rsl_rl).
        ``iteration`` and ``max_iterations`` count from the start of the run, across resumes.

        Then the checkpointer (if any) writes a checkpoint when one is due: every rank is here
        after the same iteration, so its collective RNG gather cannot deadlock. The worker's
        hooks (fault injection) come last, so a rank that "crashes" after iteration K has already
        checkpointed K."""
        now = time.perf_counter()
        if self.ctx.is_main:
            last_time, last_steps = self._last_report or (self._progress_start, 0)
            record = {
                "iteration": iteration,
                "max_iterations": max_iterations,
                "env_steps": env_steps,
                "steps_per_s": (env_steps - last_steps) / max(now - last_time, 1e-9),
                "mean_return": None if mean_return is None else float(mean_return),
                "time_s": now - self._progress_start,
                "job_env_steps": self.job_env_steps_at_start + env_steps,
            }
            if losses:
                record["losses"] = {name: float(value) for name, value in losses.items()}
            self._progress.append(record)
            self.last_progress = record
        self._last_report = (now, env_steps)
        self.job_env_steps = self.job_env_steps_at_start + env_steps
        self.iteration = iteration
        if self.checkpointer is not None:
            self.checkpointer.on_iteration(self, iteration, max_iterations)
        for hook in self.iteration_hooks:
            hook(self, iteration, max_iterations)

    @abstractmethod
    def train(self, max_iterations: int) -> TrainResult: ...

    @abstractmethod
    def save(self, path: Path) -> None: ...

    @abstractmethod
    def load(self, path: Path) -> None: ...

    @abstractmethod
    def policy_state(self) -> dict[str, torch.Tensor]:
        """Everything the exported policy depends on: actor weights and observation normalizer."""

    @abstractmethod
    def library_state(self) -> dict[str, Any]:
        """Everything the library needs to continue training, as tensors and primitives only
        (``torch.load(weights_only=True)`` must read it back); called on rank 0."""

    @abstractmethod
    def load_library_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``library_state``, on a freshly built adapter, before ``train``."""

    def deterministic_actions(self, observations: torch.Tensor) -> torch.Tensor:
        """The library's own deterministic inference (the mean action, normalizers frozen): raw
        ``[B, obs]`` observations on the adapter's device -> the ``[B, act]`` actions ``env.step``
        would receive. ``islab-train play`` acts with it; export is checked against it."""
        raise NotImplementedError(f"{type(self).__name__} has no deterministic inference")

    def inference_module(self) -> torch.nn.Module:
        """The same mapping as ``deterministic_actions`` as a plain CPU torch module with the
        observation normalizer folded in (``islab.policy.modules.DeterministicPolicy``), fit for
        ``torch.jit.trace`` and ONNX export; independent of the library's live modules."""
        raise NotImplementedError(f"{type(self).__name__} cannot export its policy")

    # -- per-rank state: the env and the episode statistics (each rank has its own) --------------

    def rank_state(self) -> dict[str, Any]:
        """This rank's env state (``env.state_dict()``) and episode statistics (``episode_stats``),
        as CPU tensors and primitives; the checkpoint gathers it from every rank."""
        return {"env": self.env.state_dict(), "episodes": self.episode_stats()}

    def load_rank_state(self, state: dict[str, Any]) -> bool:
        """Inverse of ``rank_state``, on a freshly built adapter before ``train``, so the envs go on
        mid-episode and the reported mean return goes on from the saved windows. Returns whether
        the env state was loaded: an env without one (mjlab) or of another env count starts from a
        reset, and only the finished-episode windows are restored."""
        env_state = state.get("env") or {}
        restored = False
        if env_state:
            try:
                self.env.load_state_dict(env_state)
                restored = True
            except ValueError as error:
                print(f"[islab] rank {self.ctx.rank}: env state not restored, the envs start from a reset: {error}")
        self.load_episode_stats(state.get("episodes") or {}, env_restored=restored)
        return restored

    def episode_stats(self) -> dict[str, Any]:
        """What the adapter keeps to report the mean return: the windows of recent finished
        episodes and the running per-env sums (this rank's)."""
        return {}

    def load_episode_stats(self, stats: dict[str, Any], *, env_restored: bool) -> None:
        """Inverse of ``episode_stats``; per-env running sums only when ``env_restored`` (otherwise
        the envs start new episodes). Also where an adapter refreshes observations it cached."""
        del stats, env_restored

    def extra_rng_state(self) -> dict[str, Any]:
        """Library RNG state beyond torch/numpy/random/env (skrl-JAX's PRNG key), per rank."""
        return {}

    def load_extra_rng_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``extra_rng_state``."""
        del state  # nothing beyond what islab.worker.checkpoint restores itself


def state_digest(state: dict[str, Any]) -> str:
    """sha256 over names and exact bytes of every tensor/array, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        value = state[name]
        tensor = torch.as_tensor(value).detach().to("cpu").contiguous()
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def atomic_torch_save(obj: Any, path: Path) -> Path:
    """Write a checkpoint so that a crash mid-write never leaves a truncated file at ``path``:
    save to a temporary file in the same directory, flush it to disk, then rename over."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path
