"""rl_games' episode statistics across a resume (rl-games 1.6.5 saves none of them).

rl_games reports the mean reward of its windows of recent finished episodes
(``torch_ext.AverageMeter``: the mean of the last ``games_to_track``) and sums each env's episode
under way in ``current_*`` (with ``dones``, the done flags of the last step). An islab checkpoint
keeps them per rank. Its ``train()`` recreates the running sums (``init_tensors``) and resets the
env; after a restore the agent puts the saved sums back after ``init_tensors`` (``put_back_sums``)
and the env wrapper's first reset returns the restored envs' observations instead of resetting.
"""

from __future__ import annotations

from typing import Any

import torch

EPISODE_METERS = ("game_rewards", "game_shaped_rewards", "game_lengths")
RUNNING_SUMS = ("current_rewards", "current_shaped_rewards", "current_lengths", "dones")


def episode_stats(agent: Any) -> dict[str, Any]:
    """The agent's windows (mean and fill of each meter) and running sums, as CPU tensors."""
    meters = {
        name: {"mean": getattr(agent, name).mean.detach().cpu().clone(), "size": int(getattr(agent, name).current_size)}
        for name in EPISODE_METERS
    }
    # the running sums exist once train() has begun (init_tensors); checkpoints are written inside it
    sums = {name: getattr(agent, name).detach().cpu().clone() for name in RUNNING_SUMS if hasattr(agent, name)}
    return {"meters": meters, "running": sums}


def load_meters(agent: Any, stats: dict[str, Any]) -> None:
    """Fill the agent's windows from ``episode_stats``; a meter of another size stays empty."""
    for name, saved in (stats.get("meters") or {}).items():
        meter = getattr(agent, name, None) if name in EPISODE_METERS else None
        if meter is not None and saved["mean"].numel() == meter.mean.numel():
            # as saved: rl_games' first update turns a (1,) mean into (1, 1) (it averages (n, 1, 1) rows)
            meter.mean = saved["mean"].to(meter.mean.device, meter.mean.dtype)
            meter.current_size = min(int(saved["size"]), meter.max_size)


def put_back_sums(agent: Any, sums: dict[str, torch.Tensor]) -> None:
    """Copy saved running sums into the agent's fresh ones (after ``init_tensors``); one of
    another shape (another env count) stays as rl_games made it."""
    for name, saved in sums.items():
        here = getattr(agent, name, None) if name in RUNNING_SUMS else None
        if here is not None and saved.shape == here.shape:
            here.copy_(saved)
