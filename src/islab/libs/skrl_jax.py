"""skrl (JAX) behind ``LibraryAdapter``: the same YAML, Runner, PPO and trainer as skrl-torch, with
the learner in JAX and the environment still our batched torch env.

What skrl expects, and what this module does about it:

* **Launcher and import.** Ranks are started by ``python -m skrl.utils.distributed.jax``, which
  sets JAX_RANK/JAX_LOCAL_RANK/JAX_WORLD_SIZE/JAX_COORDINATOR_ADDR/PORT; ``import skrl`` then calls
  ``jax.distributed.initialize`` (on CPU the collectives run over gloo). There is no torch
  process group. The worker sets ``JAX_PLATFORMS=cpu`` for CPU runs and
  ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` so JAX does not grab the GPU memory the env needs.
* **Environment.** skrl's JAX ``wrap_env(env, wrapper="isaaclab")`` takes the torch env and
  moves tensors through DLPack (through host memory when JAX runs on CPU).
* **Missing import (skrl 2.1.1).** ``Model.broadcast_parameters`` uses
  ``jax.experimental.multihost_utils`` without importing it: AttributeError at the first
  distributed broadcast. We import it before skrl.
* **Slow gradient all-reduce.** ``Model.reduce_parameters`` builds a fresh
  ``jax.pmap(lambda ...)`` on every call, so JAX traces and compiles it again each time, twice
  per minibatch (45 ms a call against 5 ms cached on a busy 2-core CPU). ``_reduce_parameters``
  is skrl's function with one cached pmap; PPO's KL all-reduce, built anew every epoch, gets the
  same cached pmap (``_CachedPmapJax``). Measured with 2 CPU ranks x 512 envs: 1.7k env steps/s
  with skrl's pmaps, 19.8k with the cached ones, identical results.
* **Normalizer drift.** As with torch, each rank's RunningStandardScaler would learn only from
  its own data; ``SyncedRunningStandardScaler`` gathers every rank's batch statistics and
  applies one pooled update on all ranks.
* **Seed.** The Runner calls ``skrl.utils.set_seed(base_seed)``, which adds the JAX rank.
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
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.experimental.multihost_utils  # skrl 2.1.1 uses it without importing it
import jax.numpy as jnp
import numpy as np
import skrl
import skrl.agents.jax.ppo.ppo as skrl_ppo_module
import torch
from flax import serialization, traverse_util
from skrl.agents.jax.ppo import PPO
from skrl.envs.wrappers.jax import wrap_env
from skrl.models.jax.base import Model, _unvectorize_leaves, _vectorize_leaves
from skrl.resources.preprocessors.jax import RunningStandardScaler
from skrl.utils.runner.jax import Runner

from islab.libs._skrl_common import EpisodeReturnMixin, SkrlAdapter, pooled_moments, runner_config


# -- collectives across processes, compiled once ------------------------------------------------
# Under jax.distributed every process holds one local device; a pmap over the local devices with
# a leading axis of size 1 reduces over the devices of all processes.
@functools.cache
def _psum_across_processes() -> Any:
    return jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")


@functools.cache
def _all_gather_across_processes() -> Any:
    return jax.pmap(lambda x: jax.lax.all_gather(x, "i"), axis_name="i")


def _reduce_parameters(self: Model, tree: Any) -> Any:
    """skrl 2.1.1's ``Model.reduce_parameters`` (mean of a pytree over all processes), with the
    pmap built once instead of on every call."""
    leaves, treedef = jax.tree.flatten(tree)
    vector = _psum_across_processes()(_vectorize_leaves(leaves)) / skrl.config.jax.world_size
    return jax.tree.unflatten(treedef, _unvectorize_leaves(leaves, vector))


class _CachedPmapJax(ModuleType):
    """The ``jax`` that skrl's PPO module sees: the real module, except that PPO.update's
    ``jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")`` (the KL all-reduce, built anew
    every epoch) gets the cached psum. Anything else passes through to ``jax``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(jax, name)

    @staticmethod
    def pmap(fun: Any, *args: Any, **kwargs: Any) -> Any:
        code = getattr(fun, "__code__", None)
        is_kl_sum = code is not None and code.co_name == "<lambda>" and "psum" in code.co_names
        if is_kl_sum and not args and kwargs == {"axis_name": "i"}:
            return _psum_across_processes()
        return jax.pmap(fun, *args, **kwargs)


# One place for the two pmap fixes; both are no-ops in a single process (skrl never calls them).
Model.reduce_parameters = _reduce_parameters
skrl_ppo_module.jax = _CachedPmapJax("jax")


class SyncedRunningStandardScaler(RunningStandardScaler):
    """skrl's JAX RunningStandardScaler, but a training batch's mean/variance/count is pooled
    across all processes before the running update, so every rank holds the same statistics."""

    def __call__(self, x: jax.Array | None, *, train: bool = False, inverse: bool = False) -> jax.Array | None:
        if train and x is not None and skrl.config.jax.is_distributed:
            flat = x.reshape(-1, x.shape[-1])
            count = jnp.full((1,), flat.shape[0], dtype=jnp.float32)
            local = jnp.concatenate([flat.mean(axis=0), flat.var(axis=0, ddof=1), count])
            rows = np.asarray(_all_gather_across_processes()(local[None]))[0].astype(np.float64)
            mean, variance, total = pooled_moments(rows)
            self._parallel_variance(
                jnp.asarray(mean, dtype=jnp.float32), jnp.asarray(variance, dtype=jnp.float32), float(total[0])
            )
            train = False  # updated already
        return super().__call__(x, train=train, inverse=inverse)


class TrackedPPO(EpisodeReturnMixin, PPO):
    """skrl's JAX PPO that also remembers recent episode returns on every rank."""


class IslabRunner(Runner):
    """skrl's JAX Runner, building ``TrackedPPO`` where the YAML says ``PPO``."""

    def _component(self, name: str) -> type:
        return TrackedPPO if name.lower() == "ppo" else super()._component(name)


def _jax_to_torch(value: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(jax.device_get(value)))


def _torch_to_jax(value: torch.Tensor) -> jax.Array:
    return jnp.asarray(value.numpy())


class SkrlJaxAdapter(SkrlAdapter):
    name = "skrl"
    checkpoint_suffix = ".pickle"

    def _build_runner(self) -> IslabRunner:
        ctx = self.ctx
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
        return IslabRunner(wrap_env(self.env, wrapper="isaaclab"), cfg)

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
            # a pytree (its optax state).
            target = module.state_dict.params if hasattr(module, "state_dict") else module
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
        return {"jax_key": torch.from_numpy(np.asarray(jax.device_get(skrl.config.jax.key)).astype(np.int64))}

    def load_extra_rng_state(self, state: dict[str, Any]) -> None:
        if "jax_key" in state:
            skrl.config.jax.key = jnp.asarray(state["jax_key"].numpy().astype(np.uint32))

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
