"""skrl-JAX's running standard scaler, pooled across processes.

As with torch, each rank's ``RunningStandardScaler`` would learn only from its own data and the
ranks' policies would drift apart. :class:`SyncedRunningStandardScaler` gathers every rank's batch
statistics (:func:`local_row`) and applies one pooled update on all ranks
(:func:`islab.libs._skrl_common.pooled_moments`), so every rank holds the same statistics. Under
fused sync the rows of a whole update are gathered at once beforehand
(:mod:`islab.libs.skrl_jax_ppo`) and each scaler update takes its entry instead of a collective.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import skrl
from skrl.resources.preprocessors.jax import RunningStandardScaler

from islab.libs import skrl_jax_collectives as collectives
from islab.libs._skrl_common import pooled_moments
from islab.libs.fused_sync import PrefetchedBatches


def local_row(x: jax.Array) -> jax.Array:
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
            local = local_row(x)
            if self.prefetched:
                rows = self.prefetched.take(np.asarray(local), np.array_equal)
            else:
                rows = np.asarray(collectives.all_gather_across_processes()(local[None]))[0]
            mean, variance, total = pooled_moments(rows.astype(np.float64))
            self._parallel_variance(
                jnp.asarray(mean, dtype=jnp.float32), jnp.asarray(variance, dtype=jnp.float32), float(total[0])
            )
            train = False  # updated already
        return super().__call__(x, train=train, inverse=inverse)
