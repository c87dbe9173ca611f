"""islab's rl_games agent: rl_games' continuous PPO (``A2CAgent``) on islab's ranks.

What it fixes, and why:

* Distributed: with ``multi_gpu: True`` rl_games' ``A2CBase.__init__`` calls
  ``init_process_group("nccl")`` and forces ``device = cuda:{LOCAL_RANK}``. That fails on CPU, and
  also fails on GPU here, because the worker has already joined the group before building us.
  ``RankAwareA2CAgent`` hides ``multi_gpu`` while ``super().__init__`` runs (doing by hand the two
  other things rl_games' branch does: no stats printing and no LR schedule on ranks != 0), then
  restores the rank fields, so rl_games' own collectives run: parameter broadcast at start (as
  tensors on each rank's device, not pickled: ``islab.libs.broadcast_state``), averaged gradients,
  all-reduced KL, rank 0's learning rate broadcast, ``should_exit`` broadcast.
  ``torch.cuda.set_device`` (called at the start of ``train()``) is a no-op on CPU. Under fused
  sync (the default) its base makes one collective per minibatch instead
  (:mod:`islab.libs.rl_games_fused`).
* TensorBoard: with ``multi_gpu`` hidden every rank would think it is rank 0 and open a
  SummaryWriter in the same directory; ranks != 0 get none.
* Observation and value normalizers: each rank's would drift on its own data; the agent swaps in
  ``GlobalRunningMeanStd`` after it is built (:mod:`islab.libs.rl_games_normalizer`).
* Checkpoints: rl_games stores the best reward as a numpy scalar, which
  ``torch.load(weights_only=True)`` refuses, and writes with a plain ``torch.save``. ``save`` is
  overridden to store a float and write atomically.
* Resume: rl_games' ``train()`` resets the best reward to -1e9; the agent puts the restored one
  back. The episodes under way in the saved envs go on (``init_tensors``,
  :mod:`islab.libs.rl_games_episodes`). ``on_epoch`` lets the adapter act after every epoch
  (rl_games has no callback for it), with ``frames_pending`` the epoch's frames rl_games has not
  added to ``frame`` yet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rl_games.common import a2c_common

from islab.libs.base import atomic_torch_save
from islab.libs.broadcast_state import broadcast_state_dicts
from islab.libs.fused_sync import use_fused_sync
from islab.libs.rl_games_episodes import put_back_sums
from islab.libs.rl_games_fused import FusedSyncA2CAgent
from islab.libs.rl_games_normalizer import library_syncs_normalizer, use_global_normalizers
from islab.worker.context import RankContext, init_process_group


@contextlib.contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """Replace ``owner.name`` for the duration of a ``with`` block."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


class RankAwareA2CAgent(FusedSyncA2CAgent):
    """rl_games' continuous PPO agent, with ranks from ``RankContext`` and gloo on CPU (module docstring)."""

    def __init__(self, base_name: str, params: dict, ctx: RankContext) -> None:
        self.ctx = ctx
        self.restored_sums: dict[str, torch.Tensor] = {}  # put back by init_tensors, once
        self.last_checkpoint: str | None = None  # the latest checkpoint rl_games wrote (rank 0)
        self.on_epoch: Callable[[int], None] | None = None  # called after every training epoch
        self.frames_pending = 0  # this epoch's frames while on_epoch runs (rl_games adds them after)
        self.best_to_keep: float | None = None  # the best mean reward train() forgets; put back by env_reset
        config = params["config"]
        distributed = bool(config.get("multi_gpu", False))
        # Fused sync (islab.libs.rl_games_fused): one all-reduce per minibatch, every rank runs the schedule.
        self.fused_sync = use_fused_sync(distributed)
        if distributed and not ctx.is_main:
            # What rl_games' own multi_gpu branch does for ranks != 0 (fused: every rank keeps its
            # schedule and computes the same rate from the same all-reduced KL).
            config["print_stats"] = False
            if not self.fused_sync:
                config["lr_schedule"] = None
        config["multi_gpu"] = False  # hide it: rl_games would init NCCL and force cuda:LOCAL_RANK
        no_writer = lambda *args, **kwargs: None  # noqa: E731 -- stands in for SummaryWriter(...)
        with patched(a2c_common, "SummaryWriter", a2c_common.SummaryWriter if ctx.is_main else no_writer):
            super().__init__(base_name, params)
        config["multi_gpu"] = distributed
        if not distributed:
            return
        if self.has_central_value:
            raise NotImplementedError("islab: a central value network is not supported with distributed rl_games")
        init_process_group(ctx)  # no-op when the worker already joined (the normal case)
        self.multi_gpu = True
        # Only used for torch.cuda.set_device: the GPU this rank actually uses.
        self.local_rank = torch.device(ctx.device).index if ctx.backend == "nccl" else ctx.local_rank
        self.global_rank = ctx.rank
        self.world_size = ctx.world_size
        self.global_normalizers = not library_syncs_normalizer()  # never sync them twice
        if self.global_normalizers:
            self.use_global_normalizers()
        if self.fused_sync:
            self.remember_minibatch_outputs()

    def use_global_normalizers(self) -> None:
        """Swap in ``GlobalRunningMeanStd`` (see there); needs a process group, even of one rank."""
        use_global_normalizers(self.model)
        if self.normalize_value:
            # A2CAgent keeps its own handle on the value normalizer (it updates it in
            # prepare_dataset); point it at the replacement, or the model's copy would never move.
            self.value_mean_std = self.model.value_mean_std

    def train(self) -> tuple[float, int]:
        # rl_games' train() starts by forgetting the best mean reward (last_mean_rewards = -1e9), so
        # after a resume the first epoch's reward would be "best" and overwrite the best checkpoint.
        # Keep the restored one (or an earlier train()'s): env_reset, which train() calls right after
        # the reset, puts it back.
        self.best_to_keep = float(np.asarray(self.last_mean_rewards).reshape(-1)[0])
        # rank 0's weights reach the other ranks as tensors on their own devices, not unpickled
        # onto rank 0's GPU (islab.libs.broadcast_state)
        with patched(a2c_common.dist, "broadcast_object_list", broadcast_state_dicts):
            if self.ppo_device == "cpu":
                # rl_games calls torch.cuda.set_device(local_rank) when multi_gpu; meaningless on CPU.
                with patched(torch.cuda, "set_device", lambda device: None):
                    return super().train()
            return super().train()

    def env_reset(self) -> Any:
        obs = super().env_reset()
        if self.best_to_keep is not None:
            self.last_mean_rewards, self.best_to_keep = self.best_to_keep, None
        return obs

    def init_tensors(self) -> None:
        super().init_tensors()  # train() calls it first: zero running sums, every env "done"
        put_back_sums(self, self.restored_sums)  # after a restore: the saved envs' episodes go on
        self.restored_sums = {}

    def train_epoch(self) -> tuple:
        # rl_games has no per-epoch callback for the caller; epoch_num was advanced just before.
        result = super().train_epoch()  # fused or rl_games' own (FusedSyncA2CAgent)
        if self.on_epoch is not None:
            self.frames_pending = self.curr_frames * (self.world_size if self.multi_gpu else 1)
            try:
                self.on_epoch(self.epoch_num)
            finally:
                self.frames_pending = 0
        return result

    def checkpoint_state(self) -> dict[str, Any]:
        state = self.get_full_state_weights()
        # torch.compile prefixes the keys with "_orig_mod."; a fresh (uncompiled) model loads them plain.
        state["model"] = {key.removeprefix("_orig_mod."): value for key, value in state["model"].items()}
        # rl_games keeps the best mean reward as a numpy scalar; weights_only loading refuses it.
        state["last_mean_rewards"] = float(np.asarray(state["last_mean_rewards"]).reshape(-1)[0])
        return state

    def save(self, fn: str) -> None:
        """rl_games' own checkpoints (best, periodic, last), written atomically; it adds ``.pth``."""
        self.last_checkpoint = str(atomic_torch_save(self.checkpoint_state(), Path(f"{fn}.pth")))
