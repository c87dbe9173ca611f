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

The pieces
----------
* this module: our env as an ``IVecEnv`` (``RlGamesVecEnv``), the episode log on TensorBoard
  (``EpisodeLogObserver``), and the adapter, which registers both, translates the config and
  builds islab's agent in place of rl_games' own;
* :mod:`islab.libs.rl_games_agent`: that agent, on islab's ranks (distributed without rl_games'
  own process group, TensorBoard on rank 0, atomic checkpoints, the best reward across a resume);
* :mod:`islab.libs.rl_games_fused`: its base, one collective per minibatch (fused sync);
* :mod:`islab.libs.rl_games_normalizer`: observation and value normalizers pooled across ranks;
* :mod:`islab.libs.rl_games_episodes`: episode windows and running sums across a resume.

What the adapter fixes, and why
-------------------------------
* Seeding: with ``multi_gpu`` the Runner adds the global rank to ``params.seed`` itself, so it gets
  ``ctx.base_seed``, not ``ctx.seed``.
* Directories: rl_games appends a timestamp to the experiment name unless ``full_experiment_name``
  is set; we set it and ``train_dir`` so that ``<train_dir>/<name>`` is our run directory.
  Checkpoints go to ``<run_dir>/nn``, TensorBoard events to ``<run_dir>/summaries`` (rank 0 only).
* ``torch_compile`` defaults to True in rl_games (seconds of compiling on CPU); our config turns it
  off, and the adapter treats a missing key as off.
* ``minibatch_size`` must divide ``num_envs * horizon_length`` (rl_games raises otherwise): the
  largest size that does is used, and said (``fit_minibatch_size``).
* Resume: ``library_state`` is rl_games' full state (model with both normalizers, optimizer,
  ``epoch``, ``frame``, best reward) plus ``last_lr`` and ``entropy_coef``, which rl_games does not
  save although its schedulers overwrite the optimizer's rate from ``last_lr`` every epoch. The
  islab checkpoint is written from inside the epoch (``on_epoch``), before rl_games adds the
  epoch's frames to ``frame``; ``library_state`` adds them. ``epoch_num`` is the iteration count.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from rl_games.common import env_configurations, vecenv
from rl_games.common.algo_observer import AlgoObserver
from rl_games.common.ivecenv import IVecEnv
from rl_games.torch_runner import Runner

from islab.envs.base import DirectRLEnv, counted_step
from islab.libs.base import LibraryAdapter, TrainResult, atomic_torch_save
from islab.libs.rl_games_agent import RankAwareA2CAgent
from islab.libs.rl_games_episodes import episode_stats, load_meters
from islab.libs.rl_games_normalizer import GlobalRunningMeanStd, library_syncs_normalizer, use_global_normalizers
from islab.spec.budget import rollout_length
from islab.spec.sync_cost import fit_minibatch_size
from islab.worker.context import RankContext

__all__ = [
    "ENV_NAME",
    "EpisodeLogObserver",
    "GlobalRunningMeanStd",  # the normalizer's names, imported from here by tests
    "RankAwareA2CAgent",
    "RlGamesAdapter",
    "RlGamesVecEnv",
    "fit_minibatch_size",
    "library_syncs_normalizer",
    "use_global_normalizers",
]

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
        counted = counted_step(infos)  # our envs log every step; count the steps where episodes ended
        for key, value in infos["log"].items():
            # no float(): a step never waits for the GPU
            self.sums[key] = self.sums.get(key, 0.0) + value * counted
            self.counts[key] = self.counts.get(key, 0.0) + counted

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        if self.writer is None:
            return
        for key, total in self.sums.items():
            steps = float(self.counts[key])
            if steps > 0:
                self.writer.add_scalar(f"Episode/{key}", float(total) / steps, epoch_num)
        self.sums.clear()
        self.counts.clear()


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
        agent.stop = getattr(self.checkpointer, "stop", None)  # the worker's Checkpointer has one
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
