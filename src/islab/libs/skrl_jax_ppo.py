"""skrl-JAX's PPO as islab trains it: tracked returns, cached collectives, fused sync, fast GAE.

:class:`TrackedPPO` is skrl's JAX PPO that remembers recent episode returns on every rank and, with
fused sync (``ISLAB_SYNC=fused``, the default in distributed runs), makes one collective per
minibatch (its docstring says how). skrl's PPO ``update`` calls module-level functions of
``skrl.agents.jax.ppo.ppo`` (``jax.pmap``, ``_compute_gae``, ``_update_policy``, ``_update_value``);
this module replaces them, in one place at the bottom, by versions that pass through to skrl's
unless a fused update is running (``_ACTIVE``):

* ``jax``: skrl's KL all-reduce, built anew every epoch, gets the cached psum
  (:mod:`islab.libs.skrl_jax_collectives`), or inside a fused update the KL sums that already rode
  with the gradients (``_CachedPmapJax``); ``Model.reduce_parameters`` gets the cached one too;
* ``_compute_gae``: :func:`islab.libs.skrl_jax_gae.scanned_gae`, then (fused) the gather of the
  update's normalizer batches;
* ``_update_policy`` records the minibatch for the fused reduction; ``_update_value`` answers with
  the value gradient the fused reduction computed.

All of it passes through in a single process.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import skrl
import skrl.agents.jax.ppo.ppo as skrl_ppo_module
from skrl.agents.jax.ppo import PPO
from skrl.models.jax.base import Model, _unvectorize_leaves, _vectorize_leaves

from islab.libs import skrl_jax_collectives as collectives
from islab.libs._skrl_common import EpisodeReturnMixin
from islab.libs.skrl_jax_gae import scanned_gae
from islab.libs.skrl_jax_normalizer import SyncedRunningStandardScaler, local_row


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
            return _ACTIVE[-1]._fused_epoch_kl if _ACTIVE else collectives.psum_across_processes()
        return jax.pmap(fun, *args, **kwargs)


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
        value_grad, value_loss = skrl_update_value(
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
        packed = jnp.concatenate([_vectorize_leaves(leaves), kl], axis=-1)
        summed = collectives.psum_across_processes()(packed)  # [1, N + 1]
        self._fused_kl_sums.append(float(summed[0, -1]))
        mean = summed[:, :-1] / skrl.config.jax.world_size  # skrl's own arithmetic (reduce_parameters)
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
        rows = [local_row(x) for _, x in entries]
        gathered = np.asarray(collectives.all_gather_across_processes()(jnp.concatenate(rows)[None]))[0]
        for scaler in self._synced_scalers():
            scaler.prefetched.reset()
        offset = 0
        for (scaler, _), row in zip(entries, rows, strict=True):
            scaler.prefetched.add(np.asarray(row), gathered[:, offset : offset + row.shape[0]])
            offset += row.shape[0]


# -- skrl's PPO module functions as update() sees them (pass-through unless a fused
# TrackedPPO.update runs) -----------------------------------------------------------------------
_ACTIVE: list[TrackedPPO] = []  # the agent whose fused update is running (innermost last)
# skrl's own, as its PPO module defines them (before the patches below)
skrl_compute_gae, skrl_update_policy, skrl_update_value = (
    skrl_ppo_module._compute_gae,
    skrl_ppo_module._update_policy,
    skrl_ppo_module._update_value,
)


def _compute_gae_then_prefetch(*args: Any, **kwargs: Any) -> Any:
    returns, advantages = scanned_gae(*args, **kwargs)
    if _ACTIVE:
        _ACTIVE[-1]._prefetch_normalizer_moments(kwargs["values"], returns)
    return returns, advantages


def _update_policy_recorded(policy_act: Any, policy_state_dict: Any, inputs: dict, *args: Any) -> Any:
    result = skrl_update_policy(policy_act, policy_state_dict, inputs, *args)
    if _ACTIVE:
        _ACTIVE[-1]._record_policy_step(inputs, result[3])
    return result


def _update_value_or_fused(*args: Any, **kwargs: Any) -> Any:
    agent = _ACTIVE[-1] if _ACTIVE else None
    if agent is not None and agent._fused_value is not None:
        done, agent._fused_value = agent._fused_value, None
        return done  # computed and reduced with the policy's gradient in the one psum
    return skrl_update_value(*args, **kwargs)


# One place for the pmap fixes and the fused-sync hooks; all pass through in a single process.
Model.reduce_parameters = collectives.reduce_parameters
skrl_ppo_module.jax = _CachedPmapJax("jax")
skrl_ppo_module._compute_gae = _compute_gae_then_prefetch
skrl_ppo_module._update_policy = _update_policy_recorded
skrl_ppo_module._update_value = _update_value_or_fused
