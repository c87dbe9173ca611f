"""skrl (JAX) behind ``LibraryAdapter``: the same YAML, Runner, PPO and trainer as skrl-torch, with
the learner in JAX and the environment still our batched torch env.

What skrl expects, and what this module does about it:

* **Launcher and import.** Ranks are started by ``python -m skrl.utils.distributed.jax``, which
  sets JAX_RANK/JAX_LOCAL_RANK/JAX_WORLD_SIZE/JAX_COORDINATOR_ADDR/PORT; ``import skrl`` then calls
  ``jax.distributed.initialize`` (on CPU the collectives run over gloo). There is no torch
  process group. The worker sets ``JAX_PLATFORMS=cpu`` for CPU runs and
  ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` so JAX does not grab the GPU memory the env needs.
* **GPU backend.** Plain ``jax`` (our ``[jax]`` extra) has no GPU backend on Linux and skrl only
  warns, so a cuda rank would train its learner on the CPU: a cuda rank whose
  ``jax.default_backend()`` is not ``gpu`` fails instead (``registry.JAX_CUDA_INSTALL``).
* **Environment.** skrl's JAX ``wrap_env(env, wrapper="isaaclab")`` takes the torch env and
  moves tensors through DLPack (through host memory when JAX runs on CPU). DLPack shares memory,
  and the env reuses its done buffers (mjlab its reward buffer too): the wrapper gets copies
  (``hand_over_copies``).
* **Missing import (skrl 2.1.1).** ``Model.broadcast_parameters`` uses
  ``jax.experimental.multihost_utils`` without importing it: AttributeError at the first
  distributed broadcast. We import it before skrl.
* **Slow collectives.** skrl builds a fresh ``jax.pmap`` for every gradient and KL all-reduce,
  compiled again each time; ours are built once (:mod:`islab.libs.skrl_jax_collectives`).
* **Normalizer drift.** Each rank's RunningStandardScaler would learn only from its own data;
  ``SyncedRunningStandardScaler`` pools every rank's batch statistics
  (:mod:`islab.libs.skrl_jax_normalizer`).
* **The agent.** ``TrackedPPO`` (:mod:`islab.libs.skrl_jax_ppo`) keeps recent episode returns on
  every rank and, under fused sync, makes one collective per minibatch; ``IslabRunner`` builds it
  where the YAML says ``PPO``.
* **Seed.** The Runner calls ``skrl.utils.set_seed(base_seed)``, which adds the JAX rank. The env
  keeps its own per-rank stream: skrl's wrapper would reseed it with key 0 at the first reset
  (``wrap_isaaclab_env``).
* **Output.** Experiment directory = run directory; skrl writes TensorBoard and checkpoints on
  rank 0 only; the final checkpoint is skrl's own JAX format (a pickled dict of
  ``flax.serialization`` bytes per module, what ``agent.load`` reads), written atomically.
  skrl's periodic ``agent_<timestep>.pickle`` files are skrl's plain writes; what resume relies on
  is the islab checkpoint, which is atomic.
* **Resume.** skrl's JAX ``agent.load`` restores model and preprocessor parameters but not the
  optimizer state (a TODO in skrl 2.1.1) nor the adaptive learning rates. ``library_state``
  holds all of them: every checkpoint module as ``flax.serialization.to_state_dict`` with each
  JAX array turned into a torch tensor (numpy in between), so the islab checkpoint stays a
  ``weights_only`` torch file like the other libraries'; plus both learning rates. skrl's PRNG
  key (``skrl.config.jax.key``) is per-rank RNG state, saved with the other RNGs.
* **Compile time.** skrl's GAE compiles one XLA program per rollout step; ours is a ``lax.scan``
  (:mod:`islab.libs.skrl_jax_gae`). Fresh and restored learner states are settled before training
  (``_as_trained``), so the update and Adam steps compile once, not twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import jax.experimental.multihost_utils  # skrl 2.1.1 uses it without importing it
import jax.numpy as jnp
import numpy as np
import skrl
import torch
from flax import serialization, traverse_util
from skrl.envs.wrappers.jax import wrap_env
from skrl.models.jax.base import Model
from skrl.utils.runner.jax import Runner

from islab.envs.base import DirectRLEnv
from islab.libs._skrl_common import SkrlAdapter, runner_config, wrap_isaaclab_env
from islab.libs.fused_sync import use_fused_sync
from islab.libs.registry import jax_backend_fix, jax_backend_problem
from islab.libs.skrl_jax_normalizer import SyncedRunningStandardScaler
from islab.libs.skrl_jax_ppo import TrackedPPO


class IslabRunner(Runner):
    """skrl's JAX Runner, building ``TrackedPPO`` where the YAML says ``PPO``."""

    def _component(self, name: str) -> type:
        return TrackedPPO if name.lower() == "ppo" else super()._component(name)


def _key_to_torch(key: Any) -> torch.Tensor:
    """A raw uint32 JAX PRNG key as an int64 tensor (``weights_only`` checkpoints hold no uint32)."""
    return torch.from_numpy(np.asarray(jax.device_get(key)).astype(np.int64))


def _jax_to_torch(value: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(jax.device_get(value)))


def _torch_to_jax(value: torch.Tensor) -> jax.Array:
    return jnp.asarray(value.numpy())


def _as_trained(tree: Any, device: Any) -> Any:
    """``tree`` with every array as training's own steps leave it: strongly typed and committed to
    ``device``. A jitted function is compiled per input signature, and weak types (skrl's initial
    ``log_std_parameter``) and commitment are part of it: fresh or restored parameters and optimizer
    states that are neither would compile PPO's update and Adam's step once for the first
    minibatch and again for every later one (4 of the ~5 heavy XLA compiles of a first iteration)."""
    return jax.device_put(jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree), device)


def hand_over_copies(env: DirectRLEnv) -> None:
    """Make ``env.step`` return copies of its rewards and dones, which the env may own and reuse.

    Our env's ``terminated``/``truncated`` are views of one done buffer that every step overwrites
    (``islab.envs.base``), and mjlab's reward is its reward manager's buffer. skrl-JAX's wrapper
    turns them into JAX arrays through DLPack, which on a CPU (and on a GPU, for JAX on the same
    device) shares the memory instead of copying: the "immutable" arrays in skrl's memory and in
    JAX's asynchronously dispatched computations would change under them at the next step. A copy
    per step (three [N] tensors) makes them JAX's own."""
    step = env.step

    def step_with_copies(action: torch.Tensor) -> Any:
        obs, reward, terminated, truncated, extras = step(action)
        return obs, reward.clone(), terminated.clone(), truncated.clone(), extras

    env.step = step_with_copies  # type: ignore[method-assign]


def wrap_for_jax(env: DirectRLEnv) -> Any:
    """skrl's JAX Isaac Lab wrapper around ``env``, fed copies of the env's reused buffers."""
    hand_over_copies(env)
    return wrap_isaaclab_env(wrap_env, env)


class SkrlJaxAdapter(SkrlAdapter):
    name = "skrl"
    checkpoint_suffix = ".pickle"

    def _build_runner(self) -> IslabRunner:
        ctx = self.ctx
        problem = jax_backend_problem(ctx.device, jax.default_backend())
        if problem is not None:
            raise RuntimeError(f"rank {ctx.rank}: {problem}. {jax_backend_fix()}")
        if ctx.distributed and skrl.config.jax.world_size != ctx.world_size:
            raise RuntimeError(
                f"skrl-JAX sees world size {skrl.config.jax.world_size}, the worker {ctx.world_size}: "
                "start JAX ranks with skrl's launcher (python -m skrl.utils.distributed.jax)"
            )
        if ctx.device == "cpu":
            # skrl's default is cuda:LOCAL_RANK; in distributed runs it uses the process-local device.
            skrl.config.jax.device = jax.devices("cpu")[0]
        cfg = runner_config(
            self.agent_cfg, base_seed=ctx.base_seed, run_dir=self.run_dir, scaler_class=SyncedRunningStandardScaler
        )
        runner = IslabRunner(wrap_for_jax(self.env), cfg)
        self.fused_sync = use_fused_sync(ctx.distributed) and isinstance(runner.agent, TrackedPPO)
        runner.agent.fused_sync = self.fused_sync
        return runner

    def train(self, max_iterations: int) -> Any:
        self._settle_learner_state()
        return super().train(max_iterations)

    def _settle_learner_state(self) -> None:
        """Parameters and optimizer states as training leaves them (``_as_trained``), whether built,
        broadcast or restored, so the first update compiles the programs every later one reuses.
        This shifts the action noise from the second iteration on against earlier versions: skrl's
        ``GaussianMixin.act`` folds a Python counter into its key, and tracing ``_update_policy``
        calls it too, so one trace fewer is one count fewer."""
        agent, device = self.agent, skrl.config.jax.device
        for name, module in list(agent.checkpoint_modules.items()):
            if isinstance(module, Model):
                module.state_dict = module.state_dict.replace(params=_as_trained(module.state_dict.params, device))
            elif not hasattr(module, "state_dict"):  # an optimizer (preprocessors keep theirs committed)
                settled = module.replace(state=_as_trained(module.state, device))
                agent.checkpoint_modules[name] = settled
                if getattr(agent, name, None) is module:
                    setattr(agent, name, settled)

    def save(self, path: Path) -> None:
        """skrl's ``agent.save`` format, written to a temporary file, flushed, renamed over."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        self.agent.save(str(tmp))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def load(self, path: Path) -> None:
        self.agent.load(str(path))

    def library_state(self) -> dict[str, Any]:
        agent = self.agent
        state: dict[str, Any] = {}
        for name, module in agent.checkpoint_modules.items():
            # Models and preprocessors keep their arrays in state_dict.params; an optimizer is itself
            # a pytree (its optax state), which skrl's update replaces on the agent without updating
            # checkpoint_modules: the agent's attribute is the trained one.
            target = module.state_dict.params if hasattr(module, "state_dict") else getattr(agent, name, module)
            state[name] = jax.tree.map(_jax_to_torch, serialization.to_state_dict(target))
        state["learning_rate"] = {
            "policy": float(getattr(agent, "policy_learning_rate", 0.0)),
            "value": float(getattr(agent, "value_learning_rate", 0.0)),
        }
        return state

    def load_library_state(self, state: dict[str, Any]) -> None:
        agent = self.agent
        for name, module in list(agent.checkpoint_modules.items()):
            data = jax.tree.map(_torch_to_jax, state[name])
            if hasattr(module, "state_dict"):
                params = serialization.from_state_dict(module.state_dict.params, data)
                module.state_dict = module.state_dict.replace(params=params)
            else:
                # An optimizer is an immutable pytree: replace it where the agent holds it.
                restored = serialization.from_state_dict(module, data)
                agent.checkpoint_modules[name] = restored
                if getattr(agent, name, None) is module:
                    setattr(agent, name, restored)
        for role in ("policy", "value"):
            if hasattr(agent, f"{role}_learning_rate"):
                setattr(agent, f"{role}_learning_rate", state["learning_rate"][role])

    def extra_rng_state(self) -> dict[str, Any]:
        # skrl's Gaussian policy draws its action noise from its own key (taken from the global key
        # when it was built) folded with a call counter: both continue across a resume.
        policy = self.agent.policy
        return {
            "jax_key": _key_to_torch(skrl.config.jax.key),
            "policy_noise_key": _key_to_torch(policy._g_key),
            "policy_noise_count": torch.tensor([policy._g_i], dtype=torch.int64),
        }

    def load_extra_rng_state(self, state: dict[str, Any]) -> None:
        if "jax_key" in state:
            skrl.config.jax.key = jnp.asarray(state["jax_key"].numpy().astype(np.uint32))
        if "policy_noise_key" in state:
            self.agent.policy._g_key = jnp.asarray(state["policy_noise_key"].numpy().astype(np.uint32))
            self.agent.policy._g_i = int(state["policy_noise_count"][0])

    def policy_state(self) -> dict[str, np.ndarray]:
        params = traverse_util.flatten_dict(jax.device_get(self.agent.policy.state_dict.params), sep=".")
        state = {f"policy.{key}": np.array(value) for key, value in params.items()}
        preprocessor = self.agent.checkpoint_modules.get("observation_preprocessor")
        if preprocessor is not None:
            for key, value in preprocessor.state_dict.params.items():
                state[f"observation_preprocessor.{key}"] = np.array(value)
        return state

    def deterministic_actions(self, observations: torch.Tensor) -> torch.Tensor:
        # what skrl's trainer does in eval: act, then take the mean instead of the sample
        self.agent.enable_training_mode(False, apply_to_models=True)
        _, outputs = self.agent.act(jnp.asarray(observations.cpu().numpy()), None, timestep=0, timesteps=0)
        return _jax_to_torch(outputs["mean_actions"]).to(observations.device)

    def inference_module(self) -> torch.nn.Module:
        """The policy lives in flax params: skrl's *torch* model instantiator builds the same
        network from the same YAML section and the params are copied in (islab.policy.flax_torch)."""
        from islab.policy.flax_torch import torch_policy_from_flax
        from islab.policy.modules import DeterministicPolicy, SkrlPolicyMean, skrl_normalizer

        agent = self.agent
        model = torch_policy_from_flax(
            self.agent_cfg["models"]["policy"], agent.policy.state_dict.params, agent.observation_space,
            agent.action_space,
        )  # fmt: skip
        preprocessor = agent.checkpoint_modules.get("observation_preprocessor")
        return DeterministicPolicy(SkrlPolicyMean(model), normalizer=skrl_normalizer(preprocessor))
