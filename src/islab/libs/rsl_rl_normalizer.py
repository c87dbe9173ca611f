"""rsl_rl's observation normalizers, pooled across ranks on every rsl-rl-lib we support.

rsl-rl-lib 5.5 all-reduces each normalizer update's moments itself (PR #226: three all-reduces per
normalizer per iteration, at the end of ``PPO.update``). 5.4.2, what the ``[mjlab]`` extra installs,
pools nothing: with ``obs_normalization: true`` every rank's ``EmpiricalNormalization`` learned from
its own envs at every env step, and the ranks' policies drifted apart (different digests after 2
iterations of mjlab's Go1). :func:`library_syncs_normalizer` tells the two apart.

For 5.4.x the adapter (:mod:`islab.libs.rsl_rl`) takes one of two paths:

* stock sync (``ISLAB_SYNC=stock``): :func:`use_global_normalizers` swaps in
  :class:`GlobalEmpiricalNormalization`, 5.5's arithmetic at 5.4.2's cadence: 3 all-reduces per
  normalizer per env step (Cartpole's 16 steps, actor and critic: 96 an iteration);
* fused sync (the default): 5.5's behaviour, one all-reduce an iteration. The rollout's per-step
  updates are dropped and 5.5's one update is made at the end of ``update`` from the iteration's
  stored observations (:func:`deferred_updates` collects the calls, :func:`update_normalizers_together`
  pools them in one all-reduce; :class:`islab.libs.rsl_rl_fused.FusedSyncPPO` drives both). Why 5.5's
  timing and data: then the rollout, the bootstrap and every minibatch of an iteration see the same
  statistics (5.4.2 moves them under the rollout at each step), and a fused 5.4.2 run ends
  bit-identical to a fused 5.5 run. It learns slightly differently from 5.4.2's stock path
  (statistics one iteration old while acting, the observations before each step instead of after).
  RND's normalizers stay as 5.4.2 has them.

Every path folds the global batch in with 5.5's own arithmetic (:func:`fold_in`), so every rank
holds the same statistics.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
import torch.distributed as dist
from rsl_rl.modules import EmpiricalNormalization

from islab.libs.fused_sync import all_reduce_float64

PendingUpdates = list[tuple[EmpiricalNormalization, torch.Tensor]]  # (normalizer, its update's x)


def library_syncs_normalizer() -> bool:
    """Whether the installed rsl_rl all-reduces observation-normalizer statistics itself (PR #226:
    rsl-rl-lib 5.5 does, three all-reduces per normalizer per iteration; 5.4.2, mjlab's pin, updates
    each rank's normalizer from its own data at every env step and syncs nothing)."""
    return "torch.distributed" in inspect.getsource(EmpiricalNormalization.update)


def fold_in(norm: EmpiricalNormalization, mean_x: torch.Tensor, var_x: torch.Tensor, count_x: torch.Tensor) -> None:
    """rsl_rl 5.5's ``EmpiricalNormalization.update`` arithmetic after its all-reduces, unchanged:
    fold a global batch's mean, population variance and count into the running statistics."""
    norm.count += count_x
    rate = count_x / norm.count
    delta_mean = mean_x - norm._mean
    norm._mean += rate * delta_mean
    norm._var += rate * (var_x - norm._var + delta_mean * (mean_x - norm._mean))
    norm._std = torch.sqrt(norm._var)


class GlobalEmpiricalNormalization(EmpiricalNormalization):
    """rsl-rl-lib 5.4's normalizer with 5.5's ``update``: the batch moments of all ranks are
    all-reduced before they are folded in, so every rank holds the same statistics."""

    @torch.jit.unused
    def update(self, x: torch.Tensor) -> None:
        if not self.training or (self.until is not None and self.count >= self.until):
            return
        count_x = torch.tensor(x.shape[0], dtype=self.count.dtype, device=self.count.device)
        var_x = torch.var(x, dim=0, unbiased=False, keepdim=True)
        mean_x = torch.mean(x, dim=0, keepdim=True)
        # the global mean first, then the local variances around it (5.5's order, same bits)
        local_mean_x = mean_x
        dist.all_reduce(count_x)
        mean_sum_x = mean_x * x.shape[0]
        dist.all_reduce(mean_sum_x)
        mean_x = mean_sum_x / count_x
        var_sum_x = x.shape[0] * (var_x + (local_mean_x - mean_x).square())
        dist.all_reduce(var_sum_x)
        var_x = var_sum_x / count_x
        fold_in(self, mean_x, var_x, count_x)


def use_global_normalizers(module: torch.nn.Module) -> int:
    """Make every ``EmpiricalNormalization`` in ``module`` a ``GlobalEmpiricalNormalization`` (same
    buffers, new ``update``); returns how many. For rsl-rl-lib < 5.5 in distributed runs."""
    swapped = 0
    for child in module.modules():
        if type(child) is EmpiricalNormalization:
            child.__class__ = GlobalEmpiricalNormalization
            swapped += 1
    return swapped


@contextlib.contextmanager
def deferred_updates(normalizers: list[EmpiricalNormalization], pending: PendingUpdates) -> Iterator[None]:
    """Within the block, ``norm.update(x)`` of each of ``normalizers`` only appends ``(norm, x)`` to
    ``pending`` (for ``update_normalizers_together``)."""
    for norm in normalizers:
        norm.update = lambda x, norm=norm: pending.append((norm, x))
    try:
        yield
    finally:
        for norm in normalizers:
            del norm.update


def update_normalizers_together(pending: PendingUpdates) -> None:
    """Apply the deferred ``EmpiricalNormalization.update(x)`` calls of one iteration with ONE
    all-reduce: per normalizer ``[n, n*mean, n*(var + mean^2)]`` (float64), summed over ranks, gives
    the global count, mean and (population) variance; then rsl_rl 5.5's own update arithmetic
    (modules/normalization.py) folds them in, identically on every rank."""
    active = [(n, x) for n, x in pending if n.training and not (n.until is not None and n.count >= n.until)]
    parts = []
    for _, x in active:
        count = torch.full((1,), float(x.shape[0]), dtype=torch.float64, device=x.device)
        mean = x.double().mean(dim=0, keepdim=True)
        var = x.double().var(dim=0, unbiased=False, keepdim=True)
        parts += [count, count * mean, count * (var + mean.square())]
    summed = all_reduce_float64(parts)
    for index, (norm, _) in enumerate(active):
        total, mean_sum, square_sum = summed[3 * index : 3 * index + 3]
        mean64 = mean_sum / total
        var_x = (square_sum / total - mean64.square()).clamp_min(0.0).to(norm._var.dtype)
        mean_x = mean64.to(norm._mean.dtype)
        count_x = total.to(norm.count.dtype).reshape(())
        fold_in(norm, mean_x, var_x, count_x)
