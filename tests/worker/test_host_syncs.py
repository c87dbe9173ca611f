"""No host sync per env step in our code, counted on real rollouts (issue 23, item 3).

On a GPU every ``.item()``, ``bool(t)``, ``nonzero()``, boolean-mask index or device-to-host copy
makes the CPU wait for the device; once per env step that serializes the rollout.
``islab.worker.host_syncs.HostSyncCounter`` (a ``TorchDispatchMode``) records them on CPU too, with
whose code made each one. Here: the envs' own steps make none, and real training of each library
makes none in our code during the rollout, and none of those we removed on the library side
(rsl_rl's rank-0 logger, skrl's per-step ``environment_info`` logging) come back.
"""

from __future__ import annotations

import pytest
import torch

from islab.envs import make_env
from islab.envs.base import EPISODES_ENDED
from islab.worker.host_syncs import HostSyncCounter, measure


def test_the_counter_sees_each_kind_of_sync_and_whose_code_made_it() -> None:
    values, mask = torch.arange(6.0), torch.tensor([True, False] * 3)
    counter = HostSyncCounter()
    with counter.python_level_host_reads(), counter:
        values.sum().item()
        bool(values.any())
        values.nonzero()
        values[mask]
        values.masked_fill_(mask, 0.0)  # no sync: not counted
        torch.where(mask, values, 1.0)  # no sync
        values.cpu().numpy().tolist()  # one copy to the host (the chained numpy/tolist are free)
    kinds = [event.kind for event in counter.events]
    assert kinds == ["item", "item", "nonzero", "bool_index", "to_host"]
    assert {event.origin for event in counter.events} == {"other"}  # this test file: neither islab nor a library
    assert all(event.where.startswith("tests/worker/test_host_syncs.py:") for event in counter.events)


@pytest.mark.parametrize("task", ["Islab-Cartpole-v0", "Islab-Quadcopter-v0"])
def test_env_steps_never_sync_while_episodes_end(task: str) -> None:
    env = make_env(task, 64, "cpu", seed=0)
    env.reset()
    # staggered clocks: some episodes end on most steps, and the auto-reset runs
    env.episode_length_buf.copy_(torch.arange(64) * (env.max_episode_length // 64))
    actions = torch.linspace(-1, 1, 64).reshape(64, 1).expand(64, env.single_action_space.shape[0])
    counter = HostSyncCounter()
    counter.watch_env(env)
    ended = torch.zeros((), dtype=torch.long)
    with counter.python_level_host_reads(), counter:
        for _ in range(40):
            _, _, _, _, extras = env.step(actions)
            ended += extras[EPISODES_ENDED]
    assert counter.env_steps == 40
    assert counter.events == [], counter.summary(counter.events, [])["where"]
    assert int(ended) >= 10  # the episode statistics and the reset were exercised


LIBRARY_SYNCS_REMOVED = {
    # rank 0's Logger.process_env_step: nonzero + .cpu() per step; check_nan: 3 reads per step
    "rsl_rl": ("rsl_rl/utils/logger.py", "rsl_rl/utils/utils.py"),
    "skrl-torch": ("skrl/trainers/",),  # environment_info: .item() per logged value per step, every rank
}


@pytest.mark.parametrize(
    "lib",
    ["rsl_rl", "rl_games", "skrl-torch", pytest.param("skrl-jax", marks=pytest.mark.slow)],
)
def test_real_rollouts_make_no_host_sync_in_our_code(lib: str) -> None:
    """A real training run of the library on one CPU rank: in the rollout (inside env steps and
    between them) our code syncs 0 times; once per iteration it reads a few statistics."""
    result = measure(lib, iterations=3)
    assert result["env_steps_per_iteration"] >= 16
    assert result["islab_in_env_step"] == 0, result["where"]
    assert result["rollout_per_iteration"].get("islab", 0) == 0, result["where"]
    assert result["per_iteration"].get("islab", 0) <= 3, result["where"]  # mean return, episode statistics
    for removed in LIBRARY_SYNCS_REMOVED.get(lib, ()):
        in_rollout = [where for where in result["where"] if where.startswith("rollout ") and removed in where]
        assert not in_rollout, result["where"]
