"""The sample budget: how many env steps a run trains, and how many iterations that is.

One training iteration (one PPO update) on one rank collects ``num_envs × rollout_length`` env
steps, where ``rollout_length`` is the per-iteration rollout of the library's agent config (after
the user's ``key=value`` overrides). A job of ``world_size`` ranks therefore collects
``iterations × world_size × num_envs × rollout_length`` env steps.

* ``--max-iterations M`` is per run: every rank does M updates, so adding ranks adds samples.
* ``--total-env-steps N`` is a budget for the whole job: the worker trains
  ``ceil(N / (world_size × num_envs × rollout_length))`` iterations, computed from the world size
  it actually got (an elastic ``--nnodes MIN:MAX`` job only knows it at run time), so the env steps
  summed over all ranks reach at least N whatever the number of ranks.

The rollout length's key is each library's registry row (``islab.libs.registry``); the adapters
read it through :func:`rollout_length` too. Torch-free: the launcher's dry run shows the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from islab.libs.registry import LIBRARIES
from islab.spec.dotted import field_value
from islab.spec.overrides import AgentConfigError


def rollout_length(lib: str, agent_cfg: Mapping[str, Any]) -> int:
    """Env steps per env per iteration in ``lib``'s agent config; AgentConfigError if unusable."""
    try:
        path = LIBRARIES[lib].rollout_key
    except KeyError:
        raise ValueError(f"unknown library {lib!r}") from None
    node = field_value(agent_cfg, ".".join(path), missing=None)
    if isinstance(node, bool) or not isinstance(node, int) or node < 1:
        raise AgentConfigError(
            ".".join(path),
            f"the rollout length (env steps per env per iteration) must be a whole number ≥ 1, got {node!r}",
        )
    return node


def iterations_for(total_env_steps: int, *, world_size: int, num_envs: int, rollout_length: int) -> int:
    """The fewest iterations whose env steps, summed over all ranks, reach ``total_env_steps``."""
    per_iteration = world_size * num_envs * rollout_length
    if min(total_env_steps, per_iteration) < 1:
        raise ValueError(
            f"total_env_steps and the steps per iteration must be ≥ 1, got {total_env_steps}, {per_iteration}"
        )
    return -(-total_env_steps // per_iteration)


@dataclass(frozen=True)
class Budget:
    """What one job trains: ``iterations × world_size × num_envs × rollout_length`` env steps.

    ``total_env_steps`` is the ``--total-env-steps`` target, ``None`` for a ``--max-iterations``
    run. ``world_size`` is ``(MIN, MAX)``: equal unless the node count is elastic, and then a
    ``--total-env-steps`` run's iterations are only known once the job has started."""

    iterations: int | None
    world_size: tuple[int, int]
    num_envs: int
    rollout_length: int
    total_env_steps: int | None = None

    @classmethod
    def of(
        cls,
        lib: str,
        agent_cfg: Mapping[str, Any],
        *,
        num_envs: int,
        world_size: int | tuple[int, int],
        max_iterations: int | None = None,
        total_env_steps: int | None = None,
    ) -> Budget:
        """Exactly one of ``max_iterations`` / ``total_env_steps``; the rollout length is ``lib``'s
        in ``agent_cfg``."""
        return cls.of_rollout(
            rollout_length(lib, agent_cfg),
            num_envs=num_envs,
            world_size=world_size,
            max_iterations=max_iterations,
            total_env_steps=total_env_steps,
        )

    @classmethod
    def of_rollout(
        cls,
        steps: int,
        *,
        num_envs: int,
        world_size: int | tuple[int, int],
        max_iterations: int | None = None,
        total_env_steps: int | None = None,
    ) -> Budget:
        """:meth:`of` for a rollout length already read (the launcher's: resolution reads the agent config)."""
        if (max_iterations is None) == (total_env_steps is None):
            raise ValueError("give exactly one of max_iterations and total_env_steps")
        low, high = (world_size, world_size) if isinstance(world_size, int) else world_size
        iterations = max_iterations
        if total_env_steps is not None and low == high:
            iterations = iterations_for(total_env_steps, world_size=low, num_envs=num_envs, rollout_length=steps)
        return cls(iterations, (low, high), num_envs, steps, total_env_steps)

    @property
    def fixed_world_size(self) -> bool:
        return self.world_size[0] == self.world_size[1]

    def env_steps(self, world_size: int | None = None) -> int | None:
        """Env steps summed over all ranks at ``world_size`` (default: the fixed one)."""
        size = world_size if world_size is not None else (self.world_size[0] if self.fixed_world_size else None)
        if size is None:
            return None
        iterations = self.iterations_at(size)
        return iterations * size * self.num_envs * self.rollout_length

    def iterations_at(self, world_size: int) -> int:
        if self.total_env_steps is None:
            assert self.iterations is not None
            return self.iterations
        return iterations_for(
            self.total_env_steps, world_size=world_size, num_envs=self.num_envs, rollout_length=self.rollout_length
        )

    def describe(self, *, resuming: bool = False) -> str:
        """One line, e.g. ``--total-env-steps 1000000 = 31 iterations × 2 ranks × 1024 envs × 16
        steps (1015808 env steps)``; with an elastic world size, both ends of the range."""
        more = ", counted from the resumed checkpoint" if resuming else ""
        return self._describe() + more

    def _describe(self) -> str:
        if self.total_env_steps is not None:
            head = f"--total-env-steps {self.total_env_steps}"
        else:
            head = f"--max-iterations {self.iterations} (per run)"
        if self.fixed_world_size:
            return f"{head} = {self._product(self.world_size[0])}"
        low, high = self.world_size
        what = "the iterations follow" if self.total_env_steps is not None else "the env steps grow with"
        return f"{head}; {what} the world size the job gets: {self._product(low)} to {self._product(high)}"

    def _product(self, world_size: int) -> str:
        return (
            f"{self.iterations_at(world_size)} iterations × {world_size} ranks × {self.num_envs} envs × "
            f"{self.rollout_length} steps ({self.env_steps(world_size)} env steps)"
        )

    def to_plain(self) -> dict[str, Any]:
        """For ``--dry-run --json``: ``iterations``, ``world_size`` and ``env_steps`` are ``null``
        where only the running job can know them (elastic node count)."""
        return {
            "total_env_steps": self.total_env_steps,
            "max_iterations": None if self.total_env_steps is not None else self.iterations,
            "iterations": self.iterations,
            "world_size": self.world_size[0] if self.fixed_world_size else None,
            "world_size_range": list(self.world_size),
            "num_envs_per_rank": self.num_envs,
            "rollout_length": self.rollout_length,
            "env_steps": self.env_steps(),
        }
