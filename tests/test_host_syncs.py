"""No device-to-host read per env step for episode statistics (issue item 21).

On a GPU, ``float(t)`` / ``t.item()`` / ``t.tolist()`` / ``bool(t)`` of a CUDA tensor waits for every
queued kernel: once per env step that serializes the rollout. The env and the adapters' per-step
code keep episode statistics as device tensors and read them once per iteration. On CPU the same
calls are counted: stepping the env through the rsl_rl vec env and handing every step's extras to
skrl's and rl_games' per-step callbacks must make none, however many episodes finish.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from islab.envs import make_env
from islab.libs._skrl_common import EpisodeReturnMixin
from islab.libs.rsl_rl import RslRlVecEnv

TASK = "Islab-Cartpole-v0"
HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")


class _AgentBase:
    """What EpisodeReturnMixin needs of skrl's agent (its cfg and the chained record_transition)."""

    def __init__(self) -> None:
        self.cfg = SimpleNamespace(rollouts=64)

    def record_transition(self, **kwargs: Any) -> None:
        del kwargs


class _SkrlAgent(EpisodeReturnMixin, _AgentBase):
    pass


class _Writer:
    def __init__(self) -> None:
        self.scalars: dict[str, float] = {}

    def add_scalar(self, name: str, value: float, step: int) -> None:
        self.scalars[name] = value


@pytest.fixture
def host_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every Python-level read of a tensor's value to the host, by name, while the test runs."""
    reads: list[str] = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _original: Any = original, _name: str = name) -> Any:
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_env_steps_and_per_step_callbacks_never_read_the_device(host_reads: list[str]) -> None:
    from islab.libs.rl_games import EpisodeLogObserver

    env = make_env(TASK, 64, "cpu", seed=0)
    vec_env = RslRlVecEnv(env)
    skrl_agent = _SkrlAgent()
    observer = EpisodeLogObserver()
    observer.writer = _Writer()
    # staggered time limits: some episodes finish on most steps
    env.episode_length_buf.copy_(torch.arange(64) * (env.max_episode_length // 64))
    actions = torch.linspace(-1, 1, 64).reshape(64, 1)
    host_reads.clear()
    finishing_steps = 0
    for _ in range(40):
        _, _, dones, extras = vec_env.step(actions)
        skrl_agent.record_transition(infos=extras)
        observer.process_infos(extras, dones)
        finishing_steps += "log" in extras
    assert host_reads == [], f"host reads during env steps: {sorted(set(host_reads))}"
    assert finishing_steps >= 10  # the loop did exercise the episode statistics

    # once per iteration: one read each, and the values are the plain means
    mean_rsl, mean_skrl = vec_env.mean_return(), skrl_agent.mean_episode_return()
    observer.after_print_stats(frame=0, epoch_num=1, total_time=1.0)
    assert mean_rsl is not None and math.isfinite(mean_rsl)
    assert mean_skrl is not None and math.isfinite(mean_skrl)
    assert math.isfinite(observer.writer.scalars["Episode/episode_return"])
    assert vec_env.mean_return() == mean_rsl  # nothing finished since: the last value stays
