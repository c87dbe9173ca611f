"""rsl_rl's per-step host reads (episode logging, the NaN check), made once per iteration.

rsl_rl's ``Logger.process_env_step`` runs at every env step on the logging rank (rank 0): it
finds the finished envs with ``nonzero()`` and extends its deques of the last 100 episode returns
and lengths with ``.cpu()...tolist()``, and it keeps every step's ``extras["log"]`` dict. On a GPU
the first two each make the rollout wait for the device, every step.

``defer_episode_logging`` gives the logger a ``process_env_step`` that keeps the same statistics
on the device: the last 100 returns and lengths in ring buffers (``RecentReturns``), and the
``extras["log"]`` values summed over the steps where episodes ended (our envs log at every step
and say how many ended, ``islab.envs.base.counted_step``). Before each ``log()`` (once per
iteration) the logger's own deques and ``ep_extras`` are filled from them with one device read,
and rsl_rl prints and writes exactly what it would have. With RND (intrinsic rewards) the stock
method runs: its extra deques are left as rsl_rl keeps them.

``check_for_nan`` (rsl_rl's runner, every rank, every step: ``torch.isnan(t).any()`` per
observation group, rewards and dones, three reads) is turned off in the runner's config and done
by ``DeferredNanCheck`` instead: NaN flags or-ed together on the device at every step, read once
per iteration; a NaN raises rsl_rl's ValueError at the end of the iteration instead of the step.
"""

from __future__ import annotations

from typing import Any

import torch

from islab.envs.base import counted_step
from islab.libs.recent_returns import RecentReturns


class DeferredEpisodeLog:
    """The device-side state behind a logger's ``process_env_step`` (module docstring)."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.stock_process_env_step = logger.process_env_step
        capacity = logger.rewbuffer.maxlen or 100
        self.returns = RecentReturns(logger.num_envs, logger.device, capacity)
        self.lengths = RecentReturns(logger.num_envs, logger.device, capacity)
        self.ones = torch.ones(logger.num_envs, device=logger.device)
        self.sums: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # key -> (weighted sum, counted steps)

    def process_env_step(
        self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict, intrinsic_rewards: torch.Tensor | None = None
    ) -> None:
        if self.logger.writer is None:
            return
        if intrinsic_rewards is not None:
            self.stock_process_env_step(rewards, dones, extras, intrinsic_rewards)
            return
        log = extras.get("episode", extras.get("log"))
        if log:
            counted = counted_step(extras)
            for key, value in log.items():
                value = torch.as_tensor(value, device=counted.device).float().mean()
                total, steps = self.sums.get(key, (0.0, 0.0))
                self.sums[key] = (total + value * counted, steps + counted)
        finished = dones > 0
        self.returns.step(rewards, finished)
        self.lengths.step(self.ones, finished)

    def flush(self) -> None:
        """Fill the logger's deques and ``ep_extras`` from the device state (one read)."""
        logger = self.logger
        if logger.writer is None:
            return
        keys = list(self.sums)
        capacity = self.returns.capacity
        parts = [self.returns.window[:capacity], self.lengths.window[:capacity], self.returns.filled.reshape(1)]
        parts += [torch.as_tensor(value).reshape(1) for key in keys for value in self.sums[key]]
        values = torch.cat([part.to(torch.float64) for part in parts]).tolist()
        returns, lengths = values[:capacity], values[capacity : 2 * capacity]
        filled = int(values[2 * capacity])
        logger.rewbuffer.clear()
        logger.rewbuffer.extend(returns[:filled])
        logger.lenbuffer.clear()
        logger.lenbuffer.extend(lengths[:filled])
        sums = values[2 * capacity + 1 :]
        means = {key: sums[2 * i] / sums[2 * i + 1] for i, key in enumerate(keys) if sums[2 * i + 1] > 0}
        if means:
            logger.ep_extras.append({key: torch.tensor([mean]) for key, mean in means.items()})
        self.sums.clear()


class DeferredNanCheck:
    """rsl_rl's ``check_nan`` of every step's env outputs, read once per iteration (module docstring)."""

    def __init__(self) -> None:
        self.seen: dict[str, torch.Tensor] = {}  # what was checked -> whether a NaN appeared (device)

    def observe(self, obs: Any, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        named = {f"observation group {key!r}": value for key, value in obs.items()}
        for name, tensor in {**named, "rewards": rewards, "dones": dones}.items():
            nan = (
                torch.isnan(tensor).any()
                if tensor.is_floating_point()
                else torch.zeros((), dtype=torch.bool, device=tensor.device)
            )
            self.seen[name] = nan if name not in self.seen else self.seen[name] | nan

    def check(self) -> None:
        """Raise ValueError (as rsl_rl's check_nan) if a NaN appeared since the last check (one read)."""
        names = list(self.seen)
        flags = torch.stack([self.seen[name] for name in names]).tolist() if names else []
        self.seen.clear()
        bad = [name for name, flag in zip(names, flags, strict=True) if flag]
        if bad:
            raise ValueError(
                f"The {', '.join(bad)} returned by the environment contained NaN values during this iteration. "
                "This usually indicates a bug in the environment's step() or reset() function."
            )


def defer_host_reads(runner: Any, vec_env: Any) -> DeferredEpisodeLog:
    """Give rsl_rl's ``runner.logger`` the sync-free ``process_env_step`` and, when the runner's
    config asks for ``check_for_nan``, check ``vec_env``'s outputs once per iteration instead of
    at every step; the logger's ``log`` (every rank, once per iteration) flushes and checks first."""
    logger = runner.logger
    deferred = DeferredEpisodeLog(logger)
    logger.process_env_step = deferred.process_env_step
    nan_check = None
    if runner.cfg.get("check_for_nan", True):
        runner.cfg["check_for_nan"] = False
        nan_check = DeferredNanCheck()
        step = vec_env.step

        def checked_step(actions: torch.Tensor) -> Any:
            obs, rewards, dones, extras = step(actions)
            nan_check.observe(obs, rewards, dones)
            return obs, rewards, dones, extras

        vec_env.step = checked_step
    stock_log = logger.log

    def log(*args: Any, **kwargs: Any) -> None:
        if nan_check is not None:
            nan_check.check()
        deferred.flush()
        stock_log(*args, **kwargs)

    logger.log = log
    return deferred
