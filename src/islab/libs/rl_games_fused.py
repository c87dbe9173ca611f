"""rl_games' PPO agent with one collective per minibatch (``ISLAB_SYNC=fused``, the default in distributed runs).

Stock rl_games (legacy adaptive schedule) makes per minibatch a gradient all-reduce, a KL
all-reduce and a learning-rate broadcast from rank 0, one more KL all-reduce per mini-epoch, and
our ``GlobalRunningMeanStd`` one per normalizer update (16 + 2 per iteration on Cartpole).
:class:`FusedSyncA2CAgent`, the base of islab's agent (:mod:`islab.libs.rl_games_agent`):

* during ``train_epoch`` ``multi_gpu`` is hidden, so all of rl_games' own collectives there are off;
* ``trancate_gradients_and_step`` packs the minibatch's KL (rl_games' own formula, same inputs)
  behind the gradients and all-reduces once;
* ``train_actor_critic`` hands rl_games the global KL in place of the local one, so its scheduler
  (on every rank) decides from the same value the stock path broadcasts, and ``update_lr`` rounds
  the rate as the stock broadcast does;
* the normalizer moments of the whole iteration go in one all-reduce in ``prepare_dataset``
  (:mod:`islab.libs.rl_games_normalizer`), with the ranks' preemption ballots.

That is updates + 2 collectives a fused iteration, with rl_games' ``should_exit`` broadcast. The
general mechanism is :mod:`islab.libs.fused_sync`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from rl_games.algos_torch import torch_ext
from rl_games.algos_torch.a2c_continuous import A2CAgent

from islab.libs.fused_sync import all_reduce_float64, all_reduce_gradients_and, as_broadcast_float
from islab.libs.rl_games_normalizer import GlobalRunningMeanStd, packed_moments


class FusedSyncA2CAgent(A2CAgent):
    """rl_games' continuous PPO agent whose ``train_epoch`` makes one all-reduce per minibatch when
    ``fused_sync`` is on in a distributed run (module docstring); otherwise rl_games' own."""

    fused_sync = False  # set by the subclass: fused sync chosen, in a distributed run
    global_normalizers = False  # our GlobalRunningMeanStd in place of rl_games' normalizers
    stop: Any = None  # the worker's StopRequest: its ballot rides on the normalizer all-reduce
    _fused_now = False  # inside a fused train_epoch

    def remember_minibatch_outputs(self) -> None:
        """Keep each minibatch's forward output: its KL rides with the gradients."""
        self.model.register_forward_hook(self._remember_forward)

    def train_epoch(self) -> tuple:
        with self._fused_epoch():
            return super().train_epoch()

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
        # The ranks' preemption agreement rides along (islab.worker.preemption): no collective of its own.
        ballot = [self.stop.ballot().to(parts[0].device)] if parts and self.stop is not None else []
        summed = all_reduce_float64(parts + ballot)
        for (norm, _), local, total in zip(updates, parts, summed, strict=False):
            norm.prefetched.add(local, total)
        if ballot:
            self.stop.settle(summed[-1])
