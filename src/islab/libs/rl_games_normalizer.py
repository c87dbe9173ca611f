"""rl_games' observation normalizer, synchronised across ranks (rl-games 1.6.5 lets each rank's
``RunningMeanStd`` drift on its own batches; upstream PR #363 adds a sync of its own).

Each update folds the moments of the batch of ALL ranks into the running statistics, from one
all-reduce of ``[n, n*mean, n*(var + mean^2)]`` in float64, so every rank applies the same
arithmetic to the same numbers and the statistics stay bit-identical. The fused sync of
:mod:`islab.libs.rl_games_fused` prefetches those moments for a whole iteration in one collective.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist
from rl_games.algos_torch.running_mean_std import RunningMeanStd

from islab.libs.fused_sync import PrefetchedBatches


def packed_moments(batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: int) -> torch.Tensor:
    """``[n, n*mean, n*(var + mean^2)]`` in float64: summed over ranks, the global batch's moments."""
    batch_mean, batch_var = batch_mean.double(), batch_var.double()
    n = torch.full((1,), float(batch_count), dtype=torch.float64, device=batch_mean.device)
    return torch.cat([n, n * batch_mean.reshape(-1), n * (batch_var + batch_mean.square()).reshape(-1)])


def global_moments(summed: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, variance, count) of the global batch from ``packed_moments`` summed over ranks."""
    total, size = summed[0], like.numel()
    mean = (summed[1 : 1 + size] / total).view_as(like)
    var = ((summed[1 + size :] / total).view_as(like) - mean.square()).clamp_min(0.0)
    return mean, var, total


class GlobalRunningMeanStd(RunningMeanStd):
    """``RunningMeanStd`` whose every update folds in the moments of the batch of ALL ranks.

    One all-reduce of ``packed_moments`` gives the global count, mean and second moment; every rank
    then applies the same arithmetic to the same numbers, so the running statistics stay
    bit-identical across ranks (they start equal: rl_games broadcasts the model state, buffers
    included, before training).

    Fused sync (``FusedSyncA2CAgent``) all-reduces the moments of the iteration's batches at once,
    before the first update, and keeps them in ``prefetched`` as ``(local packed, summed)``. An
    update then takes the next entry (cyclically: rl_games feeds the same minibatches in every
    mini-epoch) instead of making its own collective, after checking that the entry's local moments
    are exactly the ones this update computes, so a change in rl_games' order fails loudly.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefetched = PrefetchedBatches("rl_games")

    def _update_mean_var_count_from_moments(self, mean, var, count, batch_mean, batch_var, batch_count):
        local = packed_moments(batch_mean, batch_var, batch_count)
        if self.prefetched:
            summed = self.prefetched.take(local, torch.equal)
        else:
            summed = local
            dist.all_reduce(summed)
        global_mean, global_var, total = global_moments(summed, batch_mean)
        return super()._update_mean_var_count_from_moments(mean, var, count, global_mean, global_var, total)


def library_syncs_normalizer() -> bool:
    """Whether the installed rl_games all-reduces ``RunningMeanStd`` statistics itself (upstream PR
    #363; rl-games 1.6.5 does not). If it does, its own sync is kept and ours is not added."""
    return "all_reduce" in inspect.getsource(RunningMeanStd)


def is_running_mean_std(module: torch.nn.Module) -> bool:
    """rl_games wraps its normalizers in ``torch.jit.script``; the scripted module keeps the name."""
    if isinstance(module, torch.jit.ScriptModule):
        return module.original_name == RunningMeanStd.__name__
    return type(module) is RunningMeanStd


def use_global_normalizers(model: torch.nn.Module) -> int:
    """Replace every ``RunningMeanStd`` inside ``model`` by a ``GlobalRunningMeanStd`` with the same
    settings and statistics, in place; returns how many were replaced.

    rl_games builds its normalizers deep inside its network classes, scripted, with no hook to
    choose the class. The replacement is eager (not scripted): TorchScript cannot call
    ``torch.distributed``. Dict observations (``RunningMeanStdObs``) are not handled."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.jit.ScriptModule) and child.original_name == "RunningMeanStdObs":
                raise NotImplementedError("islab: normalizer sync for dict observations is not implemented")
            if not is_running_mean_std(child):
                continue
            synced = GlobalRunningMeanStd(child.insize, child.epsilon, child.per_channel, child.norm_only)
            synced.load_state_dict(child.state_dict())
            synced.to(child.running_mean.device).train(child.training)
            setattr(parent, name, synced)
            replaced += 1
    return replaced
