"""What the skrl torch and JAX adapters share: turning our YAML into the dict skrl's Runner takes,
pooling normalizer batch statistics across ranks, and counting episode returns.

Nothing here imports skrl: importing it has side effects (it joins a process group or
``jax.distributed`` at import time), so each adapter module decides when that happens.

skrl's ``Runner`` (``skrl.utils.runner.{torch,jax}.Runner``) takes Isaac Lab's skrl YAML as a dict
and builds models, memory, agent and trainer from it. What a run must decide instead of the file:

* ``seed``: the base seed. ``skrl.utils.set_seed`` (called by the Runner) adds the rank itself.
* ``trainer.timesteps``: ``max_iterations * agent.rollouts`` (one PPO update per ``rollouts``
  env steps, so iterations mean the same as in rsl_rl and rl_games).
* ``agent.experiment``: skrl's default directory is ``runs/<timestamp with microseconds>`` which
  differs on every rank; ours is the run directory. skrl resolves ``auto`` intervals to
  ``timesteps/100`` and ``timesteps/10``, which round to 0 (nothing written) in short runs and
  fall between updates; we write TensorBoard every iteration and about ten checkpoints a run.
  skrl itself turns both off on ranks > 0.
* ``RunningStandardScaler``: replaced by a subclass that pools statistics across ranks.
* The env's random stream: skrl's Isaac Lab wrappers remember ``config.{torch,jax}.key`` when
  built and their first ``reset`` calls ``env.reset(seed=key)``. ``wrap_env`` runs before the
  Runner's ``set_seed``, so that key is 0 on every rank (or whatever an earlier run in the process
  left): every rank's env would draw the same stream, and a resume's restored env generator would be
  overwritten. Our env is already seeded with the rank's seed when built (``make_env``) and, on
  resume, restored from the checkpoint before training, so ``wrap_isaaclab_env`` makes that first
  reset pass no seed. (The env itself keeps honouring ``reset(seed=...)``: gymnasium's contract.)
* The trainer resets the env when ``train`` starts. After a resume that would throw away the envs
  the checkpoint restored mid-episode (and their running returns), so the wrapper's first reset
  is made to read the restored envs' observations instead (``keep_restored_envs_on_first_reset``).

Resume: skrl's trainer always counts timesteps from 0. After a resume at iteration N the agent
sees timesteps shifted by ``N * rollouts`` (``timestep_offset``), so TensorBoard curves and skrl's
own checkpoint names continue where the run left off; iterations are reported as N+1, N+2, ...
"""

from __future__ import annotations

import copy
import logging
import time
from abc import abstractmethod
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from islab.envs.base import DirectRLEnv
from islab.libs.base import LibraryAdapter, TrainResult
from islab.spec.budget import rollout_length

if TYPE_CHECKING:
    from islab.worker.context import RankContext

# Agent-config keys whose value names a preprocessor class (skrl evaluates the string).
PREPROCESSOR_KEYS = ("observation_preprocessor", "state_preprocessor", "value_preprocessor")
FINAL_CHECKPOINT_STEM = "agent_final"


def rollouts(agent_cfg: dict[str, Any]) -> int:
    return rollout_length("skrl", agent_cfg)


def checkpoint_interval(max_iterations: int, steps_per_iteration: int) -> int:
    """About ten checkpoints per run, always on an iteration boundary (after an update)."""
    return max(1, max_iterations // 10) * steps_per_iteration


def runner_config(agent_cfg: dict[str, Any], *, base_seed: int, run_dir: Path, scaler_class: type) -> dict[str, Any]:
    """A copy of ``agent_cfg`` (skrl's runner YAML) with the run-specific fields filled in.
    ``trainer.timesteps`` stays as configured until ``SkrlAdapter.train`` knows the iterations."""
    cfg = copy.deepcopy(agent_cfg)
    steps = rollouts(cfg)
    cfg["seed"] = base_seed
    cfg.setdefault("trainer", {})
    max_iterations = max(1, int(cfg["trainer"].get("timesteps", steps)) // steps)
    # The worker closes the env itself; skrl would register an atexit hook per trainer.
    cfg["trainer"]["close_environment_at_exit"] = False

    experiment = cfg["agent"].setdefault("experiment", {})
    run_dir = Path(run_dir).resolve()
    experiment["directory"] = str(run_dir.parent)
    experiment["experiment_name"] = run_dir.name
    if experiment.get("write_interval", "auto") == "auto":
        experiment["write_interval"] = steps
    if experiment.get("checkpoint_interval", "auto") == "auto":
        experiment["checkpoint_interval"] = checkpoint_interval(max_iterations, steps)

    for key in PREPROCESSOR_KEYS:
        if cfg["agent"].get(key) == "RunningStandardScaler":
            cfg["agent"][key] = scaler_class
    return cfg


FALSE_GPU_WARNING = "there is no GPU backend for JAX"


class _DropFalseGpuWarning(logging.Filter):
    """skrl's JAX Isaac Lab wrapper warns "Isaac Lab runs on GPU, but there is no GPU backend for
    JAX" whenever JAX is CPU-only: for an env on the CPU nothing is wrong, and the line alarms users."""

    def filter(self, record: logging.LogRecord) -> bool:
        return FALSE_GPU_WARNING not in record.getMessage()


def quiet_skrl_logging(env_device: Any, stream: Any = None) -> None:
    """skrl's logger (made at ``import skrl``) colours every line with ANSI codes, also into a pipe or
    a rank log: plain text unless its stream is a terminal; and no false GPU warning for a CPU env."""
    logger = logging.getLogger("skrl")
    for handler in logger.handlers:
        target = stream or getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and not (target is not None and target.isatty()):
            handler.setFormatter(logging.Formatter("[%(name)s:%(levelname)s] %(message)s"))
    if torch.device(env_device).type == "cpu" and not any(isinstance(f, _DropFalseGpuWarning) for f in logger.filters):
        logger.addFilter(_DropFalseGpuWarning())


def wrap_isaaclab_env(wrap_env: Any, env: DirectRLEnv) -> Any:
    """skrl's ``wrap_env(env, wrapper="isaaclab")`` (torch's or JAX's), its first reset made to keep
    the env's own per-rank (or restored) random stream instead of reseeding it (module docstring)."""
    quiet_skrl_logging(env.device)
    wrapped = wrap_env(env, wrapper="isaaclab")
    if not hasattr(wrapped, "_seed"):  # skrl 2.1.1's name; fail loudly if a new skrl renamed it
        raise RuntimeError(f"{type(wrapped).__name__} has no _seed: check how this skrl seeds the env at reset")
    wrapped._seed = None
    return wrapped


def keep_restored_envs_on_first_reset(wrapped: Any, env: DirectRLEnv) -> None:
    """Make skrl's wrapper's next (first) reset return ``env``'s current observations instead of
    resetting it: the wrapper's own reset runs (its conversions, torch or JAX), with ``env.reset``
    standing in for the env's reset during that one call. Later resets are the wrapper's own."""
    if not getattr(wrapped, "_reset_once", False):  # skrl 2.1.1: its first reset, not yet done
        raise RuntimeError(f"{type(wrapped).__name__} was reset before the restore: its observations are stale")
    if "reset" in vars(wrapped):
        return  # armed already
    wrapper_reset = wrapped.reset

    def first_reset(*args: Any, **kwargs: Any) -> Any:
        del wrapped.reset  # from now on the wrapper's own reset
        env.reset = lambda seed=None, options=None: (env._get_observations(), {})  # type: ignore[method-assign]
        try:
            return wrapper_reset(*args, **kwargs)
        finally:
            del env.reset  # the class's reset again

    wrapped.reset = first_reset


def pooled_moments(rows: Any) -> tuple[Any, Any, Any]:
    """Combine per-rank batch statistics into those of the union of all ranks' batches.

    ``rows`` is a [world_size, 2F+1] torch tensor or numpy array; row r is rank r's
    ``[mean (F), unbiased variance (F), count]``. Returns (mean, unbiased variance, count) of
    the pooled data, exactly as if one rank had seen every sample. Every rank computes this from
    the same gathered rows in the same order, so every rank gets the same bits.
    """
    features = (rows.shape[1] - 1) // 2
    means, variances, counts = rows[:, :features], rows[:, features : 2 * features], rows[:, 2 * features :]
    total = counts.sum(0)
    mean = (counts * means).sum(0) / total
    squares = ((counts - 1) * variances + counts * (means - mean) ** 2).sum(0)
    return mean, squares / (total - 1), total


class EpisodeReturnMixin:
    """Mixed into skrl's PPO (torch or JAX) to keep the recent episode returns on every rank.

    skrl tracks episode returns only where it writes TensorBoard (rank 0), so ranks > 0 would
    know nothing. Our env reports the mean return of the episodes that finished in a step in
    ``extras["log"]["episode_return"]``, which skrl passes to ``record_transition`` as ``infos``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # one iteration's worth of steps; device tensors, read once per iteration (no per-step sync)
        self.recent_episode_returns: deque[Any] = deque(maxlen=int(self.cfg.rollouts))
        self.timestep_offset = 0  # N * rollouts after a resume at iteration N

    def record_transition(self, *, infos: Any, **kwargs: Any) -> None:
        log = infos.get("log") if isinstance(infos, dict) else None
        if log and "episode_return" in log:
            self.recent_episode_returns.append(log["episode_return"])
        super().record_transition(infos=infos, **kwargs)

    def mean_episode_return(self) -> float | None:
        returns = self.recent_episode_returns
        if not returns:
            return None
        return float(torch.stack([torch.as_tensor(value).float() for value in returns]).mean())

    def episode_window(self) -> torch.Tensor:
        """The recent per-step mean returns as one CPU tensor (the checkpoint's episode statistics)."""
        returns = [torch.as_tensor(value).detach().float().cpu().reshape(()) for value in self.recent_episode_returns]
        return torch.stack(returns) if returns else torch.zeros(0)

    def load_episode_window(self, returns: torch.Tensor, device: torch.device | str) -> None:
        self.recent_episode_returns.clear()
        self.recent_episode_returns.extend(returns.to(device).unbind(0))

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        offset = self.timestep_offset
        super().post_interaction(timestep=timestep + offset, timesteps=timesteps + offset)
        # skrl updates every `rollouts` steps; one update is one training iteration for us.
        on_update = getattr(self, "on_update", None)
        if self.training and on_update is not None and not self._rollout % self.cfg.rollouts:
            on_update()


class SkrlAdapter(LibraryAdapter):
    """The train loop both skrl adapters share: skrl's Runner builds everything from the YAML,
    its SequentialTrainer runs ``max_iterations * rollouts`` env steps, rank 0 writes a final
    checkpoint. Subclasses build the Runner for their framework and own the checkpoint format."""

    checkpoint_suffix: str
    fused_sync = False  # whether this run takes the fused path (islab.libs.fused_sync); set at build

    def __init__(self, ctx: RankContext, env: DirectRLEnv, agent_cfg: dict[str, Any], run_dir: Path) -> None:
        super().__init__(ctx, env, agent_cfg, run_dir)
        self.steps_per_iteration = rollouts(agent_cfg)
        experiment = agent_cfg["agent"].get("experiment", {})
        self._auto_checkpoints = experiment.get("checkpoint_interval", "auto") == "auto"
        self.runner = self._build_runner()

    @abstractmethod
    def _build_runner(self) -> Any:
        """Import-time fixes done, build skrl's Runner for this framework from ``self.agent_cfg``."""

    @property
    def agent(self) -> Any:
        return self.runner.agent

    def episode_stats(self) -> dict[str, Any]:
        # the per-env running returns are the env's own (episode_return_buf, in its state_dict)
        return {"returns": self.agent.episode_window()} if hasattr(self.agent, "episode_window") else {}

    def load_episode_stats(self, stats: dict[str, Any], *, env_restored: bool) -> None:
        if hasattr(self.agent, "load_episode_window"):
            self.agent.load_episode_window(stats.get("returns", torch.zeros(0)), self.env.device)
        if env_restored:
            keep_restored_envs_on_first_reset(self.runner.trainer.env, self.env)

    def train(self, max_iterations: int) -> TrainResult:
        steps = self.steps_per_iteration
        start = self.iteration
        self.runner.trainer.cfg.timesteps = max_iterations * steps
        self.agent.timestep_offset = start * steps
        # skrl set the interval when the trainer was built; ranks > 0 keep skrl's 0 (no checkpoints)
        if self._auto_checkpoints and self.agent.checkpoint_interval > 0:
            self.agent.checkpoint_interval = checkpoint_interval(max_iterations, steps)
        steps_per_iteration_all_ranks = steps * self.env.num_envs * self.ctx.world_size

        def on_update() -> None:
            done = self.iteration + 1
            mean = self.agent.mean_episode_return()
            self.report_iteration(done, start + max_iterations, (done - start) * steps_per_iteration_all_ranks, mean)

        self.agent.on_update = on_update
        started = time.perf_counter()
        self.runner.run("train")
        wall_s = time.perf_counter() - started
        checkpoint = None
        if self.ctx.is_main:
            checkpoint = self.run_dir / "checkpoints" / f"{FINAL_CHECKPOINT_STEM}{self.checkpoint_suffix}"
            self.save(checkpoint)
        return TrainResult(
            iterations=max_iterations,
            env_steps=max_iterations * steps * self.env.num_envs * self.ctx.world_size,
            wall_s=wall_s,
            mean_return=self.agent.mean_episode_return(),
            checkpoint=str(checkpoint) if checkpoint else None,
        )
