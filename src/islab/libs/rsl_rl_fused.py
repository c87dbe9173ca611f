"""rsl_rl's PPO with one collective per minibatch (``ISLAB_SYNC=fused``, the default in distributed runs).

Stock rsl_rl syncs each minibatch three times (the KL all-reduce, rank 0's learning rate broadcast,
the gradient all-reduce) and, in 5.5, each normalizer three times per iteration.
:class:`FusedSyncPPO` packs the minibatch's KL behind its gradients in ONE all-reduce and applies
rsl_rl's adaptive schedule on every rank from that global KL; the iteration's normalizer updates go
in one more (:mod:`islab.libs.rsl_rl_normalizer`). The adapter (:mod:`islab.libs.rsl_rl`) swaps it
in for rsl_rl's PPO in distributed runs; the general mechanism is :mod:`islab.libs.fused_sync`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from itertools import chain
from typing import Any

import torch
from rsl_rl.algorithms import PPO
from rsl_rl.modules import EmpiricalNormalization
from tensordict import TensorDict

from islab.libs.fused_sync import all_reduce_gradients_and, as_broadcast_float
from islab.libs.rsl_rl_normalizer import PendingUpdates, deferred_updates, update_normalizers_together


class FusedSyncPPO(PPO):
    """rsl_rl's PPO with ONE all-reduce per minibatch and one per iteration (``islab.libs.fused_sync``).

    Stock rsl_rl syncs each minibatch three times: the KL all-reduce, rank 0's learning rate
    broadcast, the gradient all-reduce; and, in 5.5, each normalizer three times per iteration.
    Here ``update`` runs rsl_rl's own loop with the adaptive schedule hidden (so its KL block with
    both collectives is skipped) and records the current minibatch; ``reduce_parameters`` (called
    after backward, before clipping and the optimizer step, exactly where the rate is first used)
    computes the same local KL as rsl_rl, packs it behind the gradients, all-reduces once, and every
    rank applies rsl_rl's schedule to the same global KL, rounded as the stock broadcast rounds it.
    Normalizer updates of the iteration are deferred to the end of ``update`` (nothing reads them in
    between: rsl_rl updates them after the last minibatch) and applied with one all-reduce.
    On rsl-rl-lib 5.4.x (``update_normalizers_as_5_5``) the rollout's per-step normalizer updates
    are dropped and 5.5's end-of-update one is made instead, in the same way.
    Symmetry augmentation is not fused (it resizes the batch): such runs use the stock path."""

    def update_normalizers_as_5_5(self) -> None:
        """5.4.x: no normalizer update per env step; ``update`` makes 5.5's one (rsl_rl_normalizer)."""
        self._normalizers_as_5_5 = True

    def _observation_normalizers(self) -> list[EmpiricalNormalization]:
        modules = chain(self.actor.modules(), self.critic.modules())
        return [m for m in modules if isinstance(m, EmpiricalNormalization)]

    def process_env_step(self, obs: TensorDict, rewards: torch.Tensor, dones: torch.Tensor, extras: dict) -> None:
        if not getattr(self, "_normalizers_as_5_5", False):
            super().process_env_step(obs, rewards, dones, extras)
            return
        with deferred_updates(self._observation_normalizers(), []):  # dropped: update() makes 5.5's
            super().process_env_step(obs, rewards, dones, extras)

    def _updates_as_5_5(self, observations: TensorDict) -> PendingUpdates:
        """5.4.x: 5.5's end-of-update normalizer update (ppo.py), deferred; 5.5 makes its own."""
        pending: PendingUpdates = []
        if getattr(self, "_normalizers_as_5_5", False):
            with deferred_updates(self._observation_normalizers(), pending):
                self.actor.update_normalization(observations)
                self.critic.update_normalization(observations)
        return pending

    def update(self) -> dict[str, float]:
        observations = self.storage.observations.flatten(0, 1)  # this iteration's, as 5.5 reads them
        if not self.is_multi_gpu or self.symmetry:
            result = super().update()
            update_normalizers_together(self._updates_as_5_5(observations))  # 5.5: nothing to do
            return result
        self._fused_adaptive = self.desired_kl is not None and self.schedule == "adaptive"
        pending: PendingUpdates = []
        with self._fused_update(pending):
            result = super().update()
        update_normalizers_together(pending + self._updates_as_5_5(observations))
        return result

    @contextlib.contextmanager
    def _fused_update(self, pending: PendingUpdates) -> Iterator[None]:
        storage, schedule = self.storage, self.schedule
        for name in ("mini_batch_generator", "recurrent_mini_batch_generator"):
            setattr(storage, name, self._recording(getattr(storage, name)))
        models = [self.actor, self.critic] + ([self.rnd] if self.rnd else [])
        normalizers = [m for model in models for m in model.modules() if isinstance(m, EmpiricalNormalization)]
        if self._fused_adaptive:
            self.schedule = "adaptive (fused into reduce_parameters)"
        self._fused_active = True
        try:
            with deferred_updates(normalizers, pending):  # applied after update(), see there
                yield
        finally:
            self._fused_active = False
            self.schedule = schedule
            for name in ("mini_batch_generator", "recurrent_mini_batch_generator"):
                delattr(storage, name)

    def _recording(self, generator_fn: Any) -> Any:
        def batches(*args: Any, **kwargs: Any) -> Iterator[Any]:
            for batch in generator_fn(*args, **kwargs):
                self._fused_batch = batch
                yield batch

        return batches

    def reduce_parameters(self) -> None:
        if not getattr(self, "_fused_active", False):
            super().reduce_parameters()
            return
        params = chain(self.actor.parameters(), self.critic.parameters(), self.rnd.parameters() if self.rnd else ())
        grads = [param.grad for param in params if param.grad is not None]
        extras = []
        if self._fused_adaptive:
            with torch.inference_mode():  # rsl_rl's own KL of this minibatch, before the step
                current = tuple(p.detach() for p in self.actor.output_distribution_params)
                kl = self.actor.get_kl_divergence(self._fused_batch.old_distribution_params, current)
                extras.append(torch.mean(kl))
        summed = all_reduce_gradients_and(grads, extras, self.gpu_world_size)
        if self._fused_adaptive:
            kl_mean = summed[0] / self.gpu_world_size
            # rsl_rl's rule, now on every rank from the same global KL (stock: rank 0, then broadcast)
            if kl_mean > self.desired_kl * 2.0:
                self.learning_rate = max(1e-5, self.learning_rate / 1.5)
            elif kl_mean < self.desired_kl / 2.0 and kl_mean > 0.0:
                self.learning_rate = min(1e-2, self.learning_rate * 1.5)
            self.learning_rate = as_broadcast_float(self.learning_rate)
            for param_group in self.optimizer.param_groups:
                param_group["lr"] = self.learning_rate
