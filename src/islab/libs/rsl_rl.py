"""rsl_rl (PyPI ``rsl-rl-lib`` 5.5, and 5.4.2: mjlab 1.6 pins it) behind ``LibraryAdapter``.

What rsl_rl expects
-------------------
* An env implementing ``rsl_rl.env.VecEnv``: attributes ``num_envs``, ``num_actions``,
  ``max_episode_length``, a settable ``episode_length_buf``, ``device``, ``cfg``;
  ``get_observations() -> TensorDict`` of observation groups, and
  ``step(actions) -> (TensorDict, rewards, dones, extras)`` with ``extras["time_outs"]`` (so PPO can
  bootstrap the value of time-limited episodes) and ``extras["log"]`` (episode statistics). rsl_rl
  never calls ``reset()``: the env must be reset before the runner starts.
* A ``train_cfg`` dict in 5.x layout: ``algorithm``/``actor``/``critic`` each a ``class_name`` plus
  constructor kwargs, ``obs_groups`` mapping the model inputs ("actor", "critic") to env groups,
  ``num_steps_per_env``, ``save_interval``, ``logger``. See islab/tasks/cartpole/agents/rsl_rl_ppo_cfg.yaml.

What we fix, and why
--------------------
* Distributed: ``OnPolicyRunner._configure_multi_gpu`` insists on ``device == cuda:{LOCAL_RANK}``
  and calls ``init_process_group("nccl")`` itself, which fails on CPU and also fails when the group
  already exists (the worker joins it before building us). ``RankAwareOnPolicyRunner`` overrides
  just that method: it takes ranks from our ``RankContext`` and reuses (or joins) the existing
  gloo/NCCL group. Everything else stays rsl_rl's own: parameter broadcast at start, bucketed
  gradient all-reduce, KL all-reduce with rank 0's learning rate broadcast, and the observation
  normalizer's all-reduced statistics. 5.4.2's ``_configure_multi_gpu`` is 5.5's, so the override
  covers both; the rest of the API the adapter uses is unchanged between them.
* Normalizers: rsl-rl-lib 5.4.2 (what the ``[mjlab]`` extra installs) does not pool its observation
  normalizers across ranks, so the ranks' policies would drift apart; on 5.4.x the adapter makes
  them pool as 5.5's do (:mod:`islab.libs.rsl_rl_normalizer`).
* Fused sync (the default in distributed runs): ``FusedSyncPPO`` makes one all-reduce per
  minibatch where rsl_rl makes three (:mod:`islab.libs.rsl_rl_fused`).
* Checkpoints: rsl_rl writes with a plain ``torch.save``; a crash mid-write leaves a truncated
  file. ``save`` is overridden to write atomically. The saved dict holds only tensors and
  primitives, so it loads with ``torch.load(weights_only=True)``.
* Only rank 0 gets a ``log_dir`` (the run directory itself, no timestamped subdirectory), so only
  rank 0 writes TensorBoard events and checkpoints.
* rsl_rl imports GitPython at import time, which raises without a ``git`` binary unless
  ``GIT_PYTHON_REFRESH=quiet``.
* rsl_rl does no seeding; the worker already seeded this process with ``ctx.seed`` (base + rank).
* Resume: rsl_rl's ``current_learning_iteration`` is the 0-based index of the last iteration
  run, and ``learn`` starts at that same index (a resumed rsl_rl run repeats its index). We count
  completed iterations (``self.iteration``) and set ``current_learning_iteration`` to it before
  ``learn``, so after a resume at N the next iteration is index N, reported as N+1.
  ``library_state`` is rsl_rl's own ``alg.save()`` dict (actor and critic with their
  normalizers, optimizer; RND if on) plus the adaptive learning rate.
"""

from __future__ import annotations

import os

from islab.libs.registry import env_fixes

# GIT_PYTHON_REFRESH=quiet before rsl_rl imports GitPython (the registry's row; the user's value wins)
os.environ.update({name: os.environ.get(name, value) for name, value in env_fixes("rsl_rl", "torch", "").items()})
import copy
import time
from pathlib import Path
from typing import Any

import torch
from rsl_rl.algorithms import PPO
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

from islab.envs.base import DirectRLEnv
from islab.libs.base import LibraryAdapter, TrainResult, atomic_torch_save
from islab.libs.fused_sync import use_fused_sync
from islab.libs.recent_returns import RecentReturns
from islab.libs.rsl_rl_deferred import defer_host_reads
from islab.libs.rsl_rl_fused import FusedSyncPPO
from islab.libs.rsl_rl_normalizer import library_syncs_normalizer, use_global_normalizers
from islab.spec.budget import rollout_length
from islab.worker.context import RankContext, init_process_group


class RslRlVecEnv(VecEnv):
    """Our ``DirectRLEnv`` seen through rsl_rl's ``VecEnv`` (as Isaac Lab's RslRlVecEnvWrapper does).

    It also keeps the returns of the last 100 episodes this rank finished, on the device (no
    per-step read): rsl_rl keeps such a window only on the logging rank, and every rank reports its
    own mean return, the one rsl_rl's logger shows (islab.libs.recent_returns).
    """

    def __init__(self, env: DirectRLEnv) -> None:
        self.env = env
        self.cfg = env.cfg
        self.num_envs = env.num_envs
        self.num_actions = int(env.single_action_space.shape[0])
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.returns = RecentReturns(env.num_envs, env.device)
        obs, _ = env.reset()  # rsl_rl never resets; the first get_observations() must be valid
        self._obs = TensorDict(obs, batch_size=[env.num_envs])

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length_buf = value  # rsl_rl randomizes it with init_at_random_ep_len

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, rewards, terminated, truncated, extras = self.env.step(actions)
        dones = terminated | truncated
        self.returns.step(rewards, dones)
        extras["time_outs"] = truncated
        self._obs = TensorDict(obs, batch_size=[self.num_envs])
        return self._obs, rewards, dones.to(torch.long), extras

    def mean_return(self) -> float | None:
        """Mean return of this rank's last 100 finished episodes (one device read: once per iteration)."""
        return self.returns.mean()

    def episode_stats(self) -> dict[str, Any]:
        return self.returns.state_dict()

    def load_episode_stats(self, stats: dict[str, Any], *, env_restored: bool) -> None:
        self.returns.load_state_dict(stats, running=env_restored)
        # what rsl_rl reads first in learn(): the restored envs' observations, not the reset's
        self._obs = TensorDict(self.env._get_observations(), batch_size=[self.num_envs]) if env_restored else self._obs


class RankAwareOnPolicyRunner(OnPolicyRunner):
    """``OnPolicyRunner`` that takes its ranks from ``RankContext`` and joins gloo on CPU."""

    def __init__(self, env: VecEnv, train_cfg: dict, ctx: RankContext, log_dir: str | None, device: str) -> None:
        self.ctx = ctx  # read by _configure_multi_gpu, which the base __init__ calls first
        super().__init__(env, train_cfg, log_dir=log_dir, device=device)

    def _configure_multi_gpu(self) -> None:
        ctx = self.ctx
        self.gpu_world_size = ctx.world_size
        self.gpu_local_rank = ctx.local_rank
        self.gpu_global_rank = ctx.rank
        self.is_distributed = ctx.distributed
        if not self.is_distributed:
            self.cfg["multi_gpu"] = None
            return
        # PPO reads this dict to turn on its gradient/KL all-reduce and rank-0-only LR updates.
        self.cfg["multi_gpu"] = {
            "global_rank": ctx.rank,
            "local_rank": ctx.local_rank,
            "world_size": ctx.world_size,
        }
        init_process_group(ctx)  # no-op when the worker already joined (the normal case)
        if ctx.backend == "nccl":
            torch.cuda.set_device(torch.device(ctx.device))

    def save(self, path: str, infos: dict | None = None) -> None:
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = infos
        atomic_torch_save(saved, Path(path))
        self.logger.save_model(path, self.current_learning_iteration)


class RslRlAdapter(LibraryAdapter):
    name = "rsl_rl"

    def __init__(self, ctx: RankContext, env: DirectRLEnv, agent_cfg: dict[str, Any], run_dir: Path) -> None:
        super().__init__(ctx, env, agent_cfg, run_dir)
        train_cfg = copy.deepcopy(agent_cfg)
        # Our own keys (not rsl_rl's): how learn() starts.
        self.init_at_random_ep_len = bool(train_cfg.pop("init_at_random_ep_len", False))
        train_cfg.pop("max_iterations", None)  # the worker's --max-iterations decides
        train_cfg.pop("seed", None)  # the worker seeded the process; rsl_rl ignores it anyway
        self.vec_env = RslRlVecEnv(env)
        self.env_restored = False  # a resume loaded the envs mid-episode (load_episode_stats)
        if ctx.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        log_dir = str(self.run_dir) if ctx.is_main else None
        self.runner = RankAwareOnPolicyRunner(self.vec_env, train_cfg, ctx, log_dir=log_dir, device=ctx.device)
        self.fused_sync = use_fused_sync(ctx.distributed) and type(self.runner.alg) is PPO
        if self.fused_sync:
            self.runner.alg.__class__ = FusedSyncPPO  # same object, fused update (see FusedSyncPPO)
        if ctx.distributed and not library_syncs_normalizer():  # 5.4.x: see islab.libs.rsl_rl_normalizer
            if self.fused_sync:
                self.runner.alg.update_normalizers_as_5_5()  # once per iteration, pooled
            else:
                use_global_normalizers(self.runner.alg.actor)
                use_global_normalizers(self.runner.alg.critic)
        self.num_steps_per_env = rollout_length(self.name, train_cfg)
        defer_host_reads(self.runner, self.vec_env)  # rank 0's logger and the NaN check: once per iteration
        self._report_each_iteration()

    def _report_each_iteration(self) -> None:
        # rsl_rl has no per-iteration callback; its logger.log() runs once per iteration on every rank.
        steps_per_iteration = self.env.num_envs * self.num_steps_per_env * self.ctx.world_size
        log_iteration = self.runner.logger.log

        def log_and_report(*, it: int, start_it: int, total_it: int, **kwargs: Any) -> None:
            log_iteration(it=it, start_it=start_it, total_it=total_it, **kwargs)
            done = it - start_it + 1
            losses = {name: value for name, value in kwargs.get("loss_dict", {}).items() if isinstance(value, float)}
            self.report_iteration(it + 1, total_it, done * steps_per_iteration, self.vec_env.mean_return(), losses)

        self.runner.logger.log = log_and_report

    def train(self, max_iterations: int) -> TrainResult:
        self.runner.current_learning_iteration = start_it = self.iteration
        started = time.perf_counter()
        # restored envs are mid-episode already: randomizing their clocks would cut those episodes
        random_lengths = self.init_at_random_ep_len and not self.env_restored
        self.runner.learn(max_iterations, init_at_random_ep_len=random_lengths)
        wall_s = time.perf_counter() - started
        # rsl_rl names its last checkpoint after the last iteration index, on rank 0 only.
        last_it = self.runner.current_learning_iteration
        checkpoint = self.run_dir / f"model_{last_it}.pt" if self.ctx.is_main else None
        if checkpoint is not None and not checkpoint.is_file():
            raise RuntimeError(f"rsl_rl did not write its final checkpoint {checkpoint}")
        return TrainResult(
            iterations=last_it - start_it + 1,
            env_steps=self.env.num_envs * self.num_steps_per_env * max_iterations * self.ctx.world_size,
            wall_s=wall_s,
            mean_return=self.vec_env.mean_return(),
            checkpoint=str(checkpoint) if checkpoint is not None else None,
        )

    def save(self, path: Path) -> None:
        self.runner.save(str(path))

    def load(self, path: Path) -> None:
        # rsl_rl's own load() uses weights_only=False; our checkpoints need no pickled objects.
        loaded = torch.load(path, map_location=self.ctx.device, weights_only=True)
        if self.runner.alg.load(loaded, None, strict=True):
            self.runner.current_learning_iteration = loaded["iter"]

    def episode_stats(self) -> dict[str, Any]:
        return self.vec_env.episode_stats()

    def load_episode_stats(self, stats: dict[str, Any], *, env_restored: bool) -> None:
        self.env_restored = env_restored
        self.vec_env.load_episode_stats(stats, env_restored=env_restored)

    def library_state(self) -> dict[str, Any]:
        state = self.runner.alg.save()
        # The adaptive schedule writes the rate into the optimizer too, but PPO reads its own copy.
        state["learning_rate"] = float(self.runner.alg.learning_rate)
        return state

    def load_library_state(self, state: dict[str, Any]) -> None:
        self.runner.alg.load(state, None, strict=True)  # reads only its own keys
        self.runner.alg.learning_rate = float(state["learning_rate"])

    def policy_state(self) -> dict[str, torch.Tensor]:
        # The actor's state dict is what export depends on: MLP weights, the action std and, when
        # obs_normalization is on, the normalizer's mean/var/std/count buffers.
        actor = self.runner.alg.get_policy()
        return {f"actor.{key}": value.detach().clone() for key, value in actor.state_dict().items()}

    def deterministic_actions(self, observations: torch.Tensor) -> torch.Tensor:
        policy = self.runner.get_inference_policy(self.ctx.device)  # eval mode: normalizer frozen
        with torch.no_grad():
            return policy(TensorDict({"policy": observations}, batch_size=[observations.shape[0]]))

    def inference_module(self) -> torch.nn.Module:
        from islab.policy.modules import DeterministicPolicy, frozen_copy

        # rsl_rl's own export form (what its export_policy_to_jit scripts): a copy of the actor's
        # observation normalizer, MLP and mean extraction.
        actor = self.runner.alg.get_policy()
        exported = frozen_copy(actor.as_jit())
        normalizer = exported.obs_normalizer if actor.obs_normalization else None
        return DeterministicPolicy(
            torch.nn.Sequential(exported.mlp, exported.deterministic_output), normalizer=normalizer
        )
