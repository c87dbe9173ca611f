"""RecentReturns keeps what rsl_rl's logger keeps (a deque of the last 100 finished episodes'
returns, extended in env order at every step) without reading the device at every step."""

from __future__ import annotations

from collections import deque

import pytest
import torch

from islab.libs.recent_returns import RecentReturns


def test_the_window_is_rsl_rls_deque_of_the_last_finished_episodes():
    generator = torch.Generator().manual_seed(0)
    num_envs, capacity = 16, 10
    ours = RecentReturns(num_envs, "cpu", capacity=capacity)
    running = torch.zeros(num_envs)
    theirs: deque[float] = deque(maxlen=capacity)  # rsl_rl's rewbuffer, as its runner fills it
    assert ours.mean() is None
    for step in range(200):
        rewards = torch.rand(num_envs, generator=generator)
        # mostly a few episodes end; every 50th step all 16 end at once (more than the window holds)
        dones = torch.rand(num_envs, generator=generator) < 0.1
        if step % 50 == 49:
            dones[:] = True
        ours.step(rewards, dones)
        running += rewards
        theirs.extend(running[dones].tolist())
        running[dones] = 0.0
        if theirs:
            assert ours.mean() == pytest.approx(sum(theirs) / len(theirs), abs=1e-5), step
    assert torch.equal(ours.running, running)


def test_state_round_trip_keeps_the_window_and_optionally_the_running_sums():
    source = RecentReturns(4, "cpu", capacity=3)
    source.step(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([True, False, True, False]))
    copy = RecentReturns(4, "cpu", capacity=3)
    copy.load_state_dict(source.state_dict(), running=False)
    assert copy.mean() == source.mean() == 2.0 and not copy.running.any()
    copy.load_state_dict(source.state_dict())
    assert torch.equal(copy.running, source.running)
