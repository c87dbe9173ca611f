"""The returns of a rank's last finished episodes, kept on the env's device.

rsl_rl's logger reports the mean return of the last 100 finished episodes (a deque it extends with
``.tolist()`` of the finished envs at every env step, on the logging rank). ``RecentReturns`` keeps
the same window without reading the device at every step: each step writes the finished episodes'
returns into a ring buffer with one ``scatter_`` (episodes that do not finish write into a discard
slot), and :meth:`RecentReturns.mean` reads the device once -- call it once per iteration.
"""

from __future__ import annotations

from typing import Any

import torch


class RecentReturns:
    def __init__(self, num_envs: int, device: torch.device | str, capacity: int = 100) -> None:
        self.capacity = capacity
        self.running = torch.zeros(num_envs, device=device)  # the return so far of each env's episode
        self.window = torch.zeros(capacity + 1, dtype=torch.float64, device=device)  # + the discard slot
        self.head = torch.zeros((), dtype=torch.long, device=device)  # the slot the next episode takes
        self.filled = torch.zeros((), dtype=torch.long, device=device)

    def step(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        """Add this step's rewards; the episodes that ``dones`` ends enter the window in env order
        (when more than ``capacity`` end at once, the last ``capacity`` of them, as a deque keeps)."""
        self.running += rewards
        order = torch.cumsum(dones, 0, dtype=torch.long) - 1  # each finished env's place among them
        count = order[-1] + 1
        keep = dones & (order >= count - self.capacity)
        slot = torch.where(keep, (self.head + order) % self.capacity, self.capacity)
        self.window.scatter_(0, slot, self.running.to(torch.float64))
        self.head = (self.head + count) % self.capacity
        self.filled = torch.clamp(self.filled + count, max=self.capacity)
        self.running.masked_fill_(dones, 0.0)

    def mean(self) -> float | None:
        """Mean return of the window (one device read), None before any episode finished."""
        total, filled = torch.stack([self.window[: self.capacity].sum(), self.filled.to(torch.float64)]).tolist()
        return total / filled if filled else None

    def state_dict(self) -> dict[str, Any]:
        """Device-free copies, for a checkpoint."""
        return {name: getattr(self, name).detach().cpu().clone() for name in ("running", "window", "head", "filled")}

    def load_state_dict(self, state: dict[str, Any], *, running: bool = True) -> None:
        """``running=False``: keep the current episodes' sums (the env was not restored with them)."""
        for name in ("window", "head", "filled") + (("running",) if running else ()):
            value = state.get(name)
            if value is not None and value.shape == getattr(self, name).shape:
                getattr(self, name).copy_(value)
