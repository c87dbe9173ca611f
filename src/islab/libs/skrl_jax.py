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
* **Compile time.** skrl's ``_compute_gae`` is a Python loop over the rollout inside ``jax.jit``,
  unrolled into one XLA program per step (32 rollouts: 4.5 s to compile on a busy CPU, every
  process, every run); ``_scanned_gae`` is the same arithmetic as a ``lax.scan`` (0.7 s), bitwise
  equal (tested). Fresh and restored learner states are settled before training
  (``_as_trained``), so the update and Adam steps compile once, not twice.
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

from islab.libs._skrl_common import (
    EpisodeReturnMixin,
    SkrlAdapter,
    pooled_moments,
    runner_config,
    wrap_isaaclab_env,
)
from islab.libs.fused_sync import PrefetchedBatches, use_fused_sync
from islab.libs.registry import jax_backend_fix, jax_backend_problem


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
    every epoch) gets the cached psum, or, inside a fused update, the KL sums that already rode
    with the gradients (no collective). Anything else passes through to ``jax``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(jax, name)

    @staticmethod
    def pmap(fun: Any, *args: Any, **kwargs: Any) -> Any:
        code = getattr(fun, "__code__", None)
        is_kl_sum = code is not None and code.co_name == "<lambda>" and "psum" in code.co_names
        if is_kl_sum and not args and kwargs == {"axis_name": "i"}:
            return _ACTIVE[-1]._fused_epoch_kl if _ACTIVE else _psum_across_processes()
        return jax.pmap(fun, *args, **kwargs)


def _local_row(x: jax.Array) -> jax.Array:
    """One rank's ``[mean (F), unbiased variance (F), count]`` of a normalizer batch."""
    flat = x.reshape(-1, x.shape[-1])
    count = jnp.full((1,), flat.shape[0], dtype=jnp.float32)
    return jnp.concatenate([flat.mean(axis=0), flat.var(axis=0, ddof=1), count])


class SyncedRunningStandardScaler(RunningStandardScaler):
    """skrl's JAX RunningStandardScaler, but a training batch's mean/variance/count is pooled
    across all processes before the running update, so every rank holds the same statistics.

    Fused sync gathers the rows of all of an update's normalizer batches at once (``prefetched``:
    ``(local row, gathered rows)``); an update then takes the next entry, after checking that its
    local row is exactly the one this update computes, instead of making its own collective."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefetched = PrefetchedBatches("skrl")

    def __call__(self, x: jax.Array | None, *, train: bool = False, inverse: bool = False) -> jax.Array | None:
        if train and x is not None and skrl.config.jax.is_distributed:
            local = _local_row(x)
            if self.prefetched:
                rows = self.prefetched.take(np.asarray(local), np.array_equal)
            else:
                rows = np.asarray(_all_gather_across_processes()(local[None]))[0]
            mean, variance, total = pooled_moments(rows.astype(np.float64))
            self._parallel_variance(
                jnp.asarray(mean, dtype=jnp.float32), jnp.asarray(variance, dtype=jnp.float32), float(total[0])
            )
            train = False  # updated already
        return super().__call__(x, train=train, inverse=inverse)


class TrackedPPO(EpisodeReturnMixin, PPO):
    """skrl's JAX PPO that also remembers recent episode returns on every rank and, with fused
    sync, makes one collective per minibatch.

    Fused sync (``islab.libs.fused_sync``). Stock skrl-JAX makes per minibatch two gradient psums
    (policy, then value), per epoch a KL psum, and our synced scalers one all_gather per normalizer
    update. The value loss does not depend on the policy's step (separate models), so here the
    policy's ``reduce_parameters`` also computes the value gradient (skrl's own jitted
    ``_update_value``, same arguments, recorded from this minibatch) and reduces policy gradient,
    value gradient and the minibatch KL in ONE cached psum; skrl's own ``_update_value`` call then
    gets that result back instead of computing it again, and the value's ``reduce_parameters``
    passes it through. The epoch's KL psum is answered from the per-minibatch sums; the normalizer
    batches of the update are gathered at once right after GAE (the first epoch's minibatches drawn
    with numpy's RNG state saved and restored, so skrl's own draw gives the same permutation)."""

    fused_sync = False  # set by the adapter

    def update(self, *, timestep: int, timesteps: int) -> None:
        if not self.fused_sync:
            super().update(timestep=timestep, timesteps=timesteps)
            return
        self._fused_kl_sums: list[float] = []
        self._fused_value: tuple[Any, Any] | None = None
        self._fused_batch: list[Any] = []
        memory, sample = self.memory, self.memory.sample
        batches: list[list[Any]] = []
        actions_index = self._tensors_names.index("actions")

        def recording_sample(*args: Any, **kwargs: Any) -> list[list[Any]]:
            batches[:] = sample(*args, **kwargs)
            return batches

        self._fused_batches, self._fused_actions_index = batches, actions_index
        memory.sample = recording_sample
        self.policy.reduce_parameters = self._fused_reduce
        self.value.reduce_parameters = lambda grad: grad  # reduced with the policy's, see above
        _ACTIVE.append(self)
        try:
            super().update(timestep=timestep, timesteps=timesteps)
        finally:
            _ACTIVE.remove(self)
            memory.__dict__.pop("sample", None)
            self.policy.__dict__.pop("reduce_parameters", None)
            self.value.__dict__.pop("reduce_parameters", None)
            for scaler in self._synced_scalers():
                scaler.prefetched.reset()

    def _record_policy_step(self, inputs: dict, kl: Any) -> None:
        """Called by the patched ``_update_policy``: this minibatch's batch, inputs and KL."""
        taken = inputs["taken_actions"]
        self._fused_batch = next(b for b in self._fused_batches if b[self._fused_actions_index] is taken)
        self._fused_inputs = {k: v for k, v in inputs.items() if k != "taken_actions"}
        self._fused_kl = kl

    def _fused_reduce(self, policy_grad: Any) -> Any:
        names = self._tensors_names
        value_grad, value_loss = _update_value(
            self.value.act,
            self.value.state_dict,
            self._fused_inputs,
            self._fused_batch[names.index("values")],
            self._fused_batch[names.index("returns")],
            self.cfg.value_loss_scale,
            self.cfg.value_clip > 0,
            self.cfg.value_clip,
        )
        leaves, treedef = jax.tree.flatten((policy_grad, value_grad))
        kl = jnp.reshape(self._fused_kl, (1, 1)).astype(jnp.float32)
        summed = _psum_across_processes()(jnp.concatenate([_vectorize_leaves(leaves), kl], axis=-1))  # [1, N + 1]
        self._fused_kl_sums.append(float(summed[0, -1]))
        mean = summed[:, :-1] / skrl.config.jax.world_size  # skrl's own arithmetic (_reduce_parameters)
        policy_mean, value_mean = jax.tree.unflatten(treedef, _unvectorize_leaves(leaves, mean))
        self._fused_value = (value_mean, value_loss)
        return policy_mean

    def _fused_epoch_kl(self, kl: Any) -> np.ndarray:
        """In place of the epoch's KL psum: the sum over ranks of the epoch's mean KL."""
        total = np.asarray([np.mean(self._fused_kl_sums)], dtype=np.float32)
        self._fused_kl_sums.clear()
        return total

    def _synced_scalers(self) -> list[SyncedRunningStandardScaler]:
        names = ("_observation_preprocessor", "_state_preprocessor", "_value_preprocessor")
        found = [getattr(self, name, None) for name in names]
        return [s for s in found if isinstance(s, SyncedRunningStandardScaler)]

    def _prefetch_normalizer_moments(self, values: Any, returns: Any) -> None:
        entries: list[tuple[SyncedRunningStandardScaler, Any]] = []
        if isinstance(self._value_preprocessor, SyncedRunningStandardScaler):
            entries += [(self._value_preprocessor, values), (self._value_preprocessor, returns)]
        for name, scaler in (("observations", self._observation_preprocessor), ("states", self._state_preprocessor)):
            if isinstance(scaler, SyncedRunningStandardScaler) and name in self._tensors_names:
                state = np.random.get_state()  # skrl draws the same permutation next
                try:
                    batches = self.memory.sample(
                        names=[name], batch_size=len(self.memory), mini_batches=self.cfg.mini_batches
                    )
                finally:
                    np.random.set_state(state)
                entries += [(scaler, batch[0]) for batch in batches]
        if not entries:
            return
        rows = [_local_row(x) for _, x in entries]
        gathered = np.asarray(_all_gather_across_processes()(jnp.concatenate(rows)[None]))[0]
        for scaler in self._synced_scalers():
            scaler.prefetched.reset()
        offset = 0
        for (scaler, _), row in zip(entries, rows, strict=True):
            scaler.prefetched.add(np.asarray(row), gathered[:, offset : offset + row.shape[0]])
            offset += row.shape[0]


@functools.partial(jax.jit, static_argnames=("time_limit_bootstrap",))
def _scanned_gae(
    rewards: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    values: jax.Array,
    last_values: jax.Array,
    discount_factor: float = 0.99,
    lambda_coefficient: float = 0.95,
    time_limit_bootstrap: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """skrl 2.1.1's ``_compute_gae`` (same signature, same float operations in the same order)
    with its unrolled Python loop over the rollout as one ``lax.scan``: it compiles in a fraction
    of the time."""
    not_done = jnp.logical_not(jnp.logical_or(terminated, truncated) if time_limit_bootstrap else terminated)
    next_values = jnp.concatenate([values[1:], last_values[None]], axis=0)

    def step(advantage: jax.Array, row: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        reward, value, next_value, step_not_done = row
        advantage = reward - value + discount_factor * step_not_done * (next_value + lambda_coefficient * advantage)
        return advantage, advantage

    rows = (rewards, values, next_values, not_done)
    _, advantages = jax.lax.scan(step, jnp.zeros_like(last_values), rows, reverse=True)
    returns = advantages + values
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return returns, advantages


# -- fused sync: skrl's PPO module functions as update() sees them (pass-through unless a fused
# TrackedPPO.update runs) -----------------------------------------------------------------------
_ACTIVE: list[TrackedPPO] = []
_compute_gae, _update_policy, _update_value = (
    skrl_ppo_module._compute_gae,
    skrl_ppo_module._update_policy,
    skrl_ppo_module._update_value,
)


def _compute_gae_then_prefetch(*args: Any, **kwargs: Any) -> Any:
    returns, advantages = _scanned_gae(*args, **kwargs)
    if _ACTIVE:
        _ACTIVE[-1]._prefetch_normalizer_moments(kwargs["values"], returns)
    return returns, advantages


def _update_policy_recorded(policy_act: Any, policy_state_dict: Any, inputs: dict, *args: Any) -> Any:
    result = _update_policy(policy_act, policy_state_dict, inputs, *args)
    if _ACTIVE:
        _ACTIVE[-1]._record_policy_step(inputs, result[3])
    return result


def _update_value_or_fused(*args: Any, **kwargs: Any) -> Any:
    agent = _ACTIVE[-1] if _ACTIVE else None
    if agent is not None and agent._fused_value is not None:
        done, agent._fused_value = agent._fused_value, None
        return done  # computed and reduced with the policy's gradient in the one psum
    return _update_value(*args, **kwargs)


# One place for the pmap fixes and the fused-sync hooks; all pass through in a single process.
Model.reduce_parameters = _reduce_parameters
skrl_ppo_module.jax = _CachedPmapJax("jax")
skrl_ppo_module._compute_gae = _compute_gae_then_prefetch
skrl_ppo_module._update_policy = _update_policy_recorded
skrl_ppo_module._update_value = _update_value_or_fused


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
        runner = IslabRunner(wrap_isaaclab_env(wrap_env, self.env), cfg)
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
