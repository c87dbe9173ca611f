"""rl_games (1.6.5) behind ``LibraryAdapter``.

What rl_games expects
---------------------
* An env behind the ``IVecEnv`` interface, found by name: ``vecenv.register(type, factory)`` tells
  rl_games how to build a vec-env type, ``env_configurations.register(name, {"vecenv_type": type,
  "env_creator": ...})`` maps the config's ``env_name`` to it. ``reset() -> obs``,
  ``step(actions) -> (obs, rewards, dones, infos)`` with ``infos["time_outs"]`` (used to bootstrap
  the value of time-limited episodes when ``value_bootstrap`` is on), ``get_env_info()`` with
  finite observation/action spaces (actions are clamped to [-1, 1] and rescaled to the action
  space), ``get_number_of_agents()``. Observations may be torch tensors on the training device, in
  a dict ``{"obs": tensor}``; then rl_games keeps everything on the device (Isaac Lab's
  ``RlGamesVecEnvWrapper`` does the same, clipping observations and actions).
* A config in rl_games' YAML layout (``params: {seed, algo, model, network, config}``), loaded by a
  ``Runner`` whose algorithm factory builds the agent named in ``algo.name``.

What we fix, and why
--------------------
* Distributed: with ``multi_gpu: True`` rl_games' ``A2CBase.__init__`` calls
  ``init_process_group("nccl")`` and forces ``device = cuda:{LOCAL_RANK}``. That fails on CPU, and
  also fails on GPU here, because the worker has already joined the group before building us.
  ``RankAwareA2CAgent`` hides ``multi_gpu`` while ``super().__init__`` runs (doing by hand the two
  other things rl_games' branch does: no stats printing and no LR schedule on ranks != 0), then
  restores the rank fields, so rl_games' own collectives run: parameter broadcast at start,
  averaged gradients, all-reduced KL, rank 0's learning rate broadcast, ``should_exit`` broadcast.
  ``torch.cuda.set_device`` (called at the start of ``train()``) is a no-op on CPU.
* TensorBoard: with ``multi_gpu`` hidden every rank would think it is rank 0 and open a
  SummaryWriter in the same directory; ranks != 0 get none.
* Observation and value normalizers: rl_games updates each rank's ``RunningMeanStd`` from that
  rank's data only, so ranks drift apart (measured 0.10) and stop holding the same policy.
  ``GlobalRunningMeanStd`` all-reduces the batch moments before folding them in, so every rank
  folds in the statistics of the global batch and all normalizers stay bit-identical. It replaces
  rl_games' (TorchScript-compiled) normalizer modules after the agent is built.
* Seeding: with ``multi_gpu`` the Runner adds the global rank to ``params.seed`` itself, so it gets
  ``ctx.base_seed``, not ``ctx.seed``.
* Directories: rl_games appends a timestamp to the experiment name unless ``full_experiment_name``
  is set; we set it and ``train_dir`` so that ``<train_dir>/<name>`` is our run directory.
  Checkpoints go to ``<run_dir>/nn``, TensorBoard events to ``<run_dir>/summaries`` (rank 0 only).
* Checkpoints: rl_games stores the best reward as a numpy scalar, which
  ``torch.load(weights_only=True)`` refuses, and writes with a plain ``torch.save``. ``save`` is
  overridden to store a float and write atomically.
* ``torch_compile`` defaults to True in rl_games (seconds of compiling on CPU); our config turns it
  off, and the adapter treats a missing key as off.
* Resume: ``library_state`` is rl_games' full state (model with both normalizers, optimizer,
  ``epoch``, ``frame``, best reward) plus ``last_lr`` and ``entropy_coef``, which rl_games does not
  save although its schedulers overwrite the optimizer's rate from ``last_lr`` every epoch. The
  islab checkpoint is written from inside the epoch (``on_epoch``), before rl_games adds the
  epoch's frames to ``frame``; ``library_state`` adds them. ``epoch_num`` is the iteration count.
  Episode statistics: ``islab.libs.rl_games_episodes``.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from rl_games.algos_torch import torch_ext
from rl_games.algos_torch.a2c_continuous import A2CAgent
from rl_games.common import a2c_common, env_configurations, vecenv
from rl_games.common.algo_observer import AlgoObserver
from rl_games.common.ivecenv import IVecEnv
from rl_games.torch_runner import Runner

from islab.envs.base import DirectRLEnv
from islab.libs.base import LibraryAdapter, TrainResult, atomic_torch_save
from islab.libs.fused_sync import all_reduce_float64, all_reduce_gradients_and, as_broadcast_float, use_fused_sync
from islab.libs.rl_games_episodes import episode_stats, load_meters, put_back_sums
from islab.libs.rl_games_normalizer import (
    GlobalRunningMeanStd,
    library_syncs_normalizer,
    packed_moments,
    use_global_normalizers,
)
from islab.spec.budget import rollout_length
from islab.worker.context import RankContext, init_process_group

ENV_NAME = "islab"  # the env_name / vecenv type our env is registered under


class RlGamesVecEnv(IVecEnv):
    """Our ``DirectRLEnv`` seen through rl_games' ``IVecEnv`` (as Isaac Lab's wrapper does)."""

    def __init__(self, env: DirectRLEnv, clip_obs: float, clip_actions: float) -> None:
        self.env = env
        self.clip_obs = clip_obs
        self.clip_actions = clip_actions
        obs_size = env.single_observation_space["policy"].shape
        act_size = env.single_action_space.shape
        # rl_games rescales its [-1, 1] actions to these bounds, so they must be finite.
        self.observation_space = gymnasium.spaces.Box(-clip_obs, clip_obs, shape=obs_size)
        self.action_space = gymnasium.spaces.Box(-clip_actions, clip_actions, shape=act_size)
        self.keep_state_on_next_reset = False  # a resume loaded the envs mid-episode: train() resets first

    def _obs(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"obs": obs["policy"].clamp(-self.clip_obs, self.clip_obs)}

    def reset(self) -> dict[str, torch.Tensor]:
        if self.keep_state_on_next_reset:  # once: the restored envs go on where they were
            self.keep_state_on_next_reset = False
            return self._obs(self.env._get_observations())
        obs, _ = self.env.reset()
        return self._obs(obs)

    def step(self, actions: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict]:
        actions = actions.clamp(-self.clip_actions, self.clip_actions)
        obs, rewards, terminated, truncated, extras = self.env.step(actions)
        extras["time_outs"] = truncated
        return self._obs(obs), rewards, (terminated | truncated).to(torch.long), extras

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict[str, Any]:
        return {"observation_space": self.observation_space, "action_space": self.action_space}


@contextlib.contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """Replace ``owner.name`` for the duration of a ``with`` block."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


class RankAwareA2CAgent(A2CAgent):
    """rl_games' continuous PPO agent, with ranks from ``RankContext`` and gloo on CPU."""

    def __init__(self, base_name: str, params: dict, ctx: RankContext) -> None:
        self.ctx = ctx
        self.restored_sums: dict[str, torch.Tensor] = {}  # put back by init_tensors, once
        self.last_checkpoint: str | None = None  # the latest checkpoint rl_games wrote (rank 0)
        self.on_epoch: Callable[[int], None] | None = None  # called after every training epoch
        self.frames_pending = 0  # this epoch's frames while on_epoch runs (rl_games adds them after)
        config = params["config"]
        distributed = bool(config.get("multi_gpu", False))
        # Fused sync (islab.libs.fused_sync): one all-reduce per minibatch, every rank runs the schedule.
        self.fused_sync = use_fused_sync(distributed)
        self._fused_now = False  # inside a fused train_epoch
        if distributed and not ctx.is_main:
            # What rl_games' own multi_gpu branch does for ranks != 0 (fused: every rank keeps its
            # schedule and computes the same rate from the same all-reduced KL).
            config["print_stats"] = False
            if not self.fused_sync:
                config["lr_schedule"] = None
        config["multi_gpu"] = False  # hide it: rl_games would init NCCL and force cuda:LOCAL_RANK
        no_writer = lambda *args, **kwargs: None  # noqa: E731 -- stands in for SummaryWriter(...)
        with patched(a2c_common, "SummaryWriter", a2c_common.SummaryWriter if ctx.is_main else no_writer):
            super().__init__(base_name, params)
        config["multi_gpu"] = distributed
        if not distributed:
            return
        if self.has_central_value:
            raise NotImplementedError("islab: a central value network is not supported with distributed rl_games")
        init_process_group(ctx)  # no-op when the worker already joined (the normal case)
        self.multi_gpu = True
        # Only used for torch.cuda.set_device: the GPU this rank actually uses.
        self.local_rank = torch.device(ctx.device).index if ctx.backend == "nccl" else ctx.local_rank
        self.global_rank = ctx.rank
        self.world_size = ctx.world_size
        self.global_normalizers = not library_syncs_normalizer()  # never sync them twice
        if self.global_normalizers:
            self.use_global_normalizers()
        if self.fused_sync:
            # The minibatch's forward output, for the KL that rides with its gradients.
            self.model.register_forward_hook(self._remember_forward)

    def use_global_normalizers(self) -> None:
        """Swap in ``GlobalRunningMeanStd`` (see there); needs a process group, even of one rank."""
        use_global_normalizers(self.model)
        if self.normalize_value:
            # A2CAgent keeps its own handle on the value normalizer (it updates it in
            # prepare_dataset); point it at the replacement, or the model's copy would never move.
            self.value_mean_std = self.model.value_mean_std

    def train(self) -> tuple[float, int]:
        if self.ppo_device == "cpu":
            # rl_games calls torch.cuda.set_device(local_rank) when multi_gpu; meaningless on CPU.
            with patched(torch.cuda, "set_device", lambda device: None):
                return super().train()
        return super().train()

    def init_tensors(self) -> None:
        super().init_tensors()  # train() calls it first: zero running sums, every env "done"
        put_back_sums(self, self.restored_sums)  # after a restore: the saved envs' episodes go on
        self.restored_sums = {}

    def train_epoch(self) -> tuple:
        # rl_games has no per-epoch callback for the caller; epoch_num was advanced just before.
        with self._fused_epoch():
            result = super().train_epoch()
        if self.on_epoch is not None:
            self.frames_pending = self.curr_frames * (self.world_size if self.multi_gpu else 1)
            try:
                self.on_epoch(self.epoch_num)
            finally:
                self.frames_pending = 0
        return result

    # -- fused sync -------------------------------------------------------------------------------
    # Stock rl_games (legacy adaptive schedule) makes per minibatch a gradient all-reduce, a KL
    # all-reduce and a learning-rate broadcast from rank 0, one more KL all-reduce per mini-epoch,
    # and our GlobalRunningMeanStd one per normalizer update (16 + 2 per iteration here). Fused:
    # during train_epoch ``multi_gpu`` is hidden, so all of rl_games' own collectives there are off;
    # ``trancate_gradients_and_step`` packs the minibatch's KL (rl_games' own formula, same inputs)
    # behind the gradients and all-reduces once; ``train_actor_critic`` hands rl_games the global KL
    # in place of the local one, so its scheduler (on every rank) decides from the same value the
    # stock path broadcasts, and ``update_lr`` rounds the rate as the stock broadcast does. The
    # normalizer moments of the whole iteration go in one all-reduce in ``prepare_dataset``.

    @contextlib.contextmanager
    def _fused_epoch(self) -> Iterator[None]:
        if not (self.fused_sync and self.multi_gpu):
            yield
            return
        self.multi_gpu, self._fused_now = False, True
        try:
            yield
        finally:
            self.multi_gpu, self._fused_now = True, False

    def _remember_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._fused_now and isinstance(output, dict) and "mus" in output:
            self._fused_output = output

    def calc_gradients(self, input_dict: dict) -> None:
        self._fused_input = input_dict
        super().calc_gradients(input_dict)

    def trancate_gradients_and_step(self) -> Any:
        if not self._fused_now:
            return super().trancate_gradients_and_step()
        inputs, output = self._fused_input, self._fused_output
        with torch.no_grad():  # rl_games' KL of this minibatch (calc_gradients computes it after the step)
            masks = inputs.get("rnn_masks")
            kl = torch_ext.policy_kl(
                output["mus"].detach(), output["sigmas"].detach(), inputs["mu"], inputs["sigma"], masks is None
            )
            if masks is not None:
                kl = (kl * masks).sum() / masks.numel()
        grads = [param.grad for param in self.model.parameters() if param.grad is not None]
        self._fused_kl = all_reduce_gradients_and(grads, [kl], self.world_size)[0] / self.world_size
        return super().trancate_gradients_and_step()  # multi_gpu hidden: clip and step only

    def train_actor_critic(self, input_dict: dict) -> tuple:
        result = super().train_actor_critic(input_dict)
        if self._fused_now:
            # The KL rl_games reads for its schedule and statistics: the global one.
            self.train_result = result = (*result[:3], self._fused_kl, *result[4:])
        return result

    def update_lr(self, lr: float) -> None:
        super().update_lr(as_broadcast_float(lr) if self._fused_now else lr)

    def prepare_dataset(self, batch_dict: dict) -> None:
        if self._fused_now and self.global_normalizers:
            self._prefetch_normalizer_moments(batch_dict)
        super().prepare_dataset(batch_dict)

    def _prefetch_normalizer_moments(self, batch_dict: dict) -> None:
        """All normalizer updates of this iteration, in rl_games' order, in ONE all-reduce: the value
        normalizer on values then returns (prepare_dataset), the observation normalizer on each
        minibatch (contiguous slices of the rollout, not shuffled, the same in every mini-epoch:
        rl_games' set_train in train_actor_critic re-enables the updates its mini-epoch loop stops)."""
        updates: list[tuple[GlobalRunningMeanStd, torch.Tensor]] = []
        if self.normalize_value and not self.config.get("freeze_critic", False):
            updates += [(self.value_mean_std, batch_dict["values"]), (self.value_mean_std, batch_dict["returns"])]
        obs = batch_dict["obses"]
        if self.normalize_input and not self.is_rnn and isinstance(obs, torch.Tensor):
            size = self.minibatch_size
            for start in range(0, obs.shape[0] - size + 1, size):
                updates.append((self.model.running_mean_std, self._preproc_obs(obs[start : start + size])))
        updates = [(norm, x) for norm, x in updates if isinstance(norm, GlobalRunningMeanStd)]
        parts = []
        for norm, x in updates:
            norm.prefetched.reset()
            # RunningMeanStd.forward's own moments of the batch (axis 0, population variance)
            parts.append(packed_moments(x.mean(norm.axis), x.var(norm.axis, unbiased=False), x.size(0)))
        for (norm, _), local, summed in zip(updates, parts, all_reduce_float64(parts), strict=True):
            norm.prefetched.add(local, summed)

    def checkpoint_state(self) -> dict[str, Any]:
        state = self.get_full_state_weights()
        # torch.compile prefixes the keys with "_orig_mod."; a fresh (uncompiled) model loads them plain.
        state["model"] = {key.removeprefix("_orig_mod."): value for key, value in state["model"].items()}
        # rl_games keeps the best mean reward as a numpy scalar; weights_only loading refuses it.
        state["last_mean_rewards"] = float(np.asarray(state["last_mean_rewards"]).reshape(-1)[0])
        return state

    def save(self, fn: str) -> None:
        """rl_games' own checkpoints (best, periodic, last), written atomically; it adds ``.pth``."""
        self.last_checkpoint = str(atomic_torch_save(self.checkpoint_state(), Path(f"{fn}.pth")))


class EpisodeLogObserver(AlgoObserver):
    """Writes the env's episode statistics (``extras["log"]``) to TensorBoard on rank 0.

    Stands in for rl_games' DefaultAlgoObserver, which loops in Python over every finished env
    looking for keys our env does not have (as Isaac Lab's own observer does)."""

    def __init__(self) -> None:
        self.writer = None
        self.sums: dict[str, Any] = {}  # device tensors: summed per step, read once per epoch
        self.counts: dict[str, int] = {}

    def after_init(self, algo: Any) -> None:
        self.writer = algo.writer

    def process_infos(self, infos: dict, done_indices: torch.Tensor) -> None:
        if self.writer is None or not isinstance(infos, dict) or "log" not in infos:
            return
        for key, value in infos["log"].items():
            self.sums[key] = self.sums.get(key, 0.0) + value  # no float(): a step never waits for the GPU
            self.counts[key] = self.counts.get(key, 0) + 1

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        if self.writer is None:
            return
        for key, total in self.sums.items():
            self.writer.add_scalar(f"Episode/{key}", float(total) / self.counts[key], epoch_num)
        self.sums.clear()
        self.counts.clear()


def fit_minibatch_size(requested: int, batch_size: int) -> int:
    """The largest minibatch size <= ``requested`` that divides ``batch_size`` (rl_games requires
    it to divide num_envs * horizon_length; Isaac Lab's 16384 assumes 4096 envs)."""
    size = min(requested, batch_size)
    while batch_size % size:
        size -= 1
    return size


class RlGamesAdapter(LibraryAdapter):
    name = "rl_games"

    def __init__(self, ctx: RankContext, env: DirectRLEnv, agent_cfg: dict[str, Any], run_dir: Path) -> None:
        super().__init__(ctx, env, agent_cfg, run_dir)
        params = copy.deepcopy(agent_cfg)["params"]
        env_cfg = params.get("env", {})
        self.vec_env = RlGamesVecEnv(
            env,
            clip_obs=float(env_cfg.get("clip_observations", np.inf)),
            clip_actions=float(env_cfg.get("clip_actions", 1.0)),
        )
        vecenv.register(ENV_NAME, lambda config_name, num_actors, **kwargs: self.vec_env)
        env_configurations.register(ENV_NAME, {"vecenv_type": ENV_NAME, "env_creator": lambda **kwargs: self.vec_env})

        params["seed"] = ctx.base_seed  # rl_games adds the global rank itself when multi_gpu
        params.setdefault("torch_threads", 0)  # 0: leave the thread count the worker chose
        config = params["config"]
        config.update(
            env_name=ENV_NAME,
            num_actors=env.num_envs,
            device=ctx.device,
            device_name=ctx.device,
            multi_gpu=ctx.distributed,
            train_dir=str(self.run_dir.parent),
            full_experiment_name=self.run_dir.name,
        )
        config.setdefault("torch_compile", False)
        self.horizon_length = rollout_length(self.name, agent_cfg)
        self.fit_minibatch(config, env.num_envs * self.horizon_length)
        self.runner = Runner(algo_observer=EpisodeLogObserver())
        # Our agent replaces rl_games' under the same name, so the config's algo.name still works.
        self.runner.algo_factory.register_builder(
            "a2c_continuous", lambda **kwargs: RankAwareA2CAgent(ctx=ctx, **kwargs)
        )
        self.runner.load({"params": params})
        self.agent: RankAwareA2CAgent = self.runner.algo_factory.create(
            self.runner.algo_name, base_name="run", params=self.runner.params
        )
        self.compile_mode = config["torch_compile"]
        self.fused_sync = self.agent.fused_sync and self.agent.multi_gpu

    def fit_minibatch(self, config: dict[str, Any], batch_size: int) -> None:
        """Make ``minibatch_size`` divide the batch, saying so when it changes (rl_games would raise)."""
        if "minibatch_size" not in config:
            return  # minibatch_size_per_env: rl_games derives a size that always divides
        requested = int(config["minibatch_size"])
        config["minibatch_size"] = fit_minibatch_size(requested, batch_size)
        if config["minibatch_size"] != requested and self.ctx.is_main:
            print(
                f"[islab] rl_games minibatch_size {requested} does not divide num_envs * horizon_length = "
                f"{batch_size}; using {config['minibatch_size']}",
                flush=True,
            )

    def train(self, max_iterations: int) -> TrainResult:
        agent = self.agent
        if self.compile_mode:
            mode = self.compile_mode if isinstance(self.compile_mode, str) else "default"
            agent.model = torch.compile(agent.model, mode=mode)
            self.compile_mode = False  # once
        start_epoch = agent.epoch_num
        agent.max_epochs = start_epoch + max_iterations  # rl_games stops when epoch_num reaches it
        steps_per_epoch = self.env.num_envs * self.horizon_length * self.ctx.world_size

        def report(epoch: int) -> None:
            mean = float(agent.game_rewards.get_mean()[0]) if agent.game_rewards.current_size > 0 else None
            self.report_iteration(epoch, agent.max_epochs, (epoch - start_epoch) * steps_per_epoch, mean)

        agent.on_epoch = report
        started = time.perf_counter()
        agent.train()
        wall_s = time.perf_counter() - started
        iterations = agent.epoch_num - start_epoch
        mean_return = float(agent.game_rewards.get_mean()[0]) if agent.game_rewards.current_size > 0 else None
        return TrainResult(
            iterations=iterations,
            env_steps=self.env.num_envs * self.horizon_length * iterations * self.ctx.world_size,
            wall_s=wall_s,
            mean_return=mean_return,
            checkpoint=agent.last_checkpoint if self.ctx.is_main else None,
        )

    def save(self, path: Path) -> None:
        atomic_torch_save(self.agent.checkpoint_state(), Path(path))

    def load(self, path: Path) -> None:
        checkpoint = torch.load(path, map_location=self.ctx.device, weights_only=True)
        self.agent.set_full_state_weights(checkpoint)

    def library_state(self) -> dict[str, Any]:
        agent = self.agent
        state = agent.checkpoint_state()
        state["frame"] = int(state["frame"]) + agent.frames_pending
        state["last_lr"] = float(agent.last_lr)
        state["entropy_coef"] = float(agent.entropy_coef)
        return state

    def load_library_state(self, state: dict[str, Any]) -> None:
        agent = self.agent
        agent.set_full_state_weights(state)  # load_state_dict copies onto each parameter's device
        agent.last_lr = float(state["last_lr"])
        agent.entropy_coef = float(state["entropy_coef"])
        self.iteration = int(agent.epoch_num)

    def episode_stats(self) -> dict[str, Any]:
        return episode_stats(self.agent)

    def load_episode_stats(self, stats: dict[str, Any], *, env_restored: bool) -> None:
        load_meters(self.agent, stats)  # the running sums belong to the saved envs' episodes:
        self.agent.restored_sums = dict(stats.get("running") or {}) if env_restored else {}
        self.vec_env.keep_state_on_next_reset = env_restored

    def policy_state(self) -> dict[str, torch.Tensor]:
        # The whole model: actor/critic MLP, mu and sigma heads, and the running_mean_std (obs) and
        # value_mean_std buffers. torch.compile prefixes keys with "_orig_mod."; strip it.
        state = self.agent.model.state_dict()
        return {key.removeprefix("_orig_mod."): value.detach().clone() for key, value in state.items()}

    def deterministic_actions(self, observations: torch.Tensor) -> torch.Tensor:
        # rl_games' own path: the env wrapper's observation clip, the model (normalizer in eval
        # mode) -> "mus", the agent's clamp and rescale, the env wrapper's action clip.
        agent = self.agent
        agent.model.eval()
        obs = agent.cast_obs(self.vec_env._obs({"policy": observations})["obs"])  # as env_reset/step do
        with torch.no_grad():
            result = agent.model({"is_train": False, "obs": agent._preproc_obs(obs), "prev_actions": None})
        clip = self.vec_env.clip_actions
        return agent.preprocess_actions(result["mus"]).clamp(-clip, clip)

    def inference_module(self) -> torch.nn.Module:
        from islab.policy.modules import DeterministicPolicy, ObservationNormalizer, frozen_copy

        agent = self.agent
        model = getattr(agent.model, "_orig_mod", agent.model)  # torch.compile's wrapper
        network = model.a2c_network
        if network.is_rnn() or len(network.actor_cnn) > 0 or not network.is_continuous:
            raise NotImplementedError("islab: export supports rl_games' continuous MLP actor only")
        normalizer = None
        if model.normalize_input:
            rms = model.running_mean_std
            if rms.norm_only or rms.per_channel:
                raise NotImplementedError("islab: export supports rl_games' default observation normalizer only")
            # rl_games' formula: (x - mean) / sqrt(var + eps), clipped to +-5
            denominator = torch.sqrt(rms.running_var.float() + rms.epsilon)
            normalizer = ObservationNormalizer(rms.running_mean.float(), denominator, clip=5.0)
        body = torch.nn.Sequential(frozen_copy(network.actor_mlp), frozen_copy(network.mu), frozen_copy(network.mu_act))
        clip = self.vec_env.clip_actions
        if not agent.clip_actions:
            return DeterministicPolicy(body, normalizer=normalizer, observation_clip=self.vec_env.clip_obs,
                                       action_low=-clip, action_high=clip)  # fmt: skip
        low, high = agent.actions_low.cpu(), agent.actions_high.cpu()  # rescale_actions: a * d + m
        offset = (high + low) / 2.0
        return DeterministicPolicy(
            body, normalizer=normalizer, observation_clip=self.vec_env.clip_obs, action_low=-1.0, action_high=1.0,
            action_scale=(high - low) / 2.0, action_offset=offset if bool(offset.any()) else None,
        )  # fmt: skip
