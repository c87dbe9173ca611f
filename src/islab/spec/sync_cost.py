"""What one training iteration synchronises, and what that costs: the one home of the sync model.

docs/scaling.md's model, in the parts both of its users need -- the pre-flight's prediction
(:mod:`islab.preflight.prediction`, from the job's own measurements) and ``scripts/scaling_model.py``
(published fabrics, 1-64 GPUs):

* one all-reduce of ``S`` bytes over ``n`` ranks costs ``t(S, n) = alpha + 2 (n - 1) / n * S / busbw``
  (:func:`allreduce_s`; :func:`ring_bytes` is the ring's ``2 (n - 1) / n * S``, which is also how
  nccl-tests, and the probe, turn a measured time into a bus bandwidth);
* what an iteration of islab's worker all-reduces with fused sync (``ISLAB_SYNC=fused``, the
  default, :mod:`islab.libs.fused_sync`): one buffer per optimizer update (every gradient plus the
  KL and a loss statistic) and at most :data:`FUSED_PER_ITERATION` small ones (the normalizer
  moments, the ranks' agreement), :meth:`SyncWork.fused`;
* optimizer updates per iteration (epochs x minibatches) and the gradient sizes, from a library's
  agent config and the task's observation and action sizes (:func:`sync_work`).

Gradient sizes are ESTIMATED from the config's layer sizes: the weights and biases of each MLP and
the action noise (a std or log-std per action), as the libraries build them for a flat observation
vector. Exact for the MLP policies islab's tasks ship (tests check Cartpole against the parameter
count torch reports); an architecture the config describes otherwise (CNN, RNN, extra inputs)
counts its MLP part only. For a small policy the bytes hardly matter: ``alpha`` dominates.

Pure and torch-free: values in, values out.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from islab.spec.dotted import MISSING, field_value

FLOAT_BYTES = 4
FUSED_EXTRA_FLOATS = 2  # the KL and a loss statistic ride behind the gradients of every update
FUSED_PER_ITERATION = 2  # at most this many more collectives per iteration (normalizer moments, agreement)
SYNC_ENV = "ISLAB_SYNC"
SYNC_MODES = ("fused", "stock")


class ConfigShapeError(ValueError):
    """An agent config whose update loop or network this model cannot read (a message says which key)."""


def sync_mode(environ: Mapping[str, str]) -> str:
    """``fused`` or ``stock`` from ``ISLAB_SYNC`` (default ``fused``); anything else is an error."""
    value = environ.get(SYNC_ENV, "").strip().lower() or "fused"
    if value not in SYNC_MODES:
        raise ValueError(f"error: {SYNC_ENV}: {value!r} is not fused or stock. Set {SYNC_ENV}=fused or stock.")
    return value


def ring_bytes(nbytes: float, ranks: int) -> float:
    """Bytes each rank moves in a ring all-reduce of ``nbytes``: ``2 (n - 1) / n * S``."""
    return 2 * (ranks - 1) / ranks * nbytes


def allreduce_s(nbytes: float, ranks: int, alpha_s: float, busbw_bytes_per_s: float) -> float:
    """``t(S, n) = alpha + 2 (n - 1) / n * S / busbw``; 0 on one rank (nothing to reduce)."""
    if ranks <= 1:
        return 0.0
    return alpha_s + ring_bytes(nbytes, ranks) / busbw_bytes_per_s


def mlp_params(sizes: Sequence[int]) -> int:
    """Weights + biases of a fully connected stack ``sizes[0] -> sizes[1] -> ...``."""
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def fit_minibatch_size(requested: int, batch_size: int) -> int:
    """The largest minibatch size <= ``requested`` that divides ``batch_size`` (rl_games requires
    it to divide num_envs * horizon_length; Isaac Lab's 16384 assumes 4096 envs)."""
    size = min(requested, batch_size)
    while batch_size % size:
        size -= 1
    return size


@dataclass(frozen=True)
class SyncWork:
    """What one rank of one library synchronises per iteration, read from its config."""

    lib: str  # rsl_rl, rl_games, skrl-torch, skrl-jax
    rollout: int  # env steps per env per iteration
    updates: int  # optimizer updates per iteration (epochs x minibatches)
    grad_floats: tuple[int, ...]  # the gradient all-reduces of one stock update, in floats each
    small_floats: int  # the largest non-gradient collective (normalizer moments: 2 x obs + 1)

    @property
    def grad_params(self) -> int:
        return sum(self.grad_floats)

    def fused(self) -> list[tuple[int, int]]:
        """[(count per iteration, floats each)] with fused sync: one buffer per update, a few small ones."""
        return [(self.updates, self.grad_params + FUSED_EXTRA_FLOATS), (FUSED_PER_ITERATION, self.small_floats)]


def label(lib: str, ml_framework: str = "torch") -> str:
    """The model's name for a library and framework: ``skrl-torch`` / ``skrl-jax``, else the library."""
    return f"skrl-{ml_framework}" if lib == "skrl" else lib


def _get(cfg: Mapping[str, Any], path: str) -> Any:
    node = field_value(cfg, path, missing=MISSING)
    if node is MISSING:
        raise ConfigShapeError(f"the agent config has no {path!r}")
    return node


def _count(cfg: Mapping[str, Any], path: str) -> int:
    value = _get(cfg, path)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigShapeError(f"{path} must be a whole number >= 1, got {value!r}")
    return value


def _layers(value: Any, path: str) -> list[int]:
    if not isinstance(value, Sequence) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigShapeError(f"{path} is not a list of layer sizes: {value!r}")
    return list(value)


def updates_per_iteration(lib: str, agent_cfg: Mapping[str, Any], num_envs: int) -> int:
    """Optimizer updates (minibatches) per iteration of ``lib``'s agent config: epochs x minibatches
    (rl_games: mini-epochs x the minibatches of ``num_envs x horizon`` steps, the minibatch size fitted
    as islab's adapter fits it); ConfigShapeError when a key is missing."""
    if lib == "rsl_rl":
        return _count(agent_cfg, "algorithm.num_learning_epochs") * _count(agent_cfg, "algorithm.num_mini_batches")
    if lib == "skrl":
        return _count(agent_cfg, "agent.learning_epochs") * _count(agent_cfg, "agent.mini_batches")
    if lib != "rl_games":
        raise ConfigShapeError(f"no sync model for library {lib!r}")
    config = _get(agent_cfg, "params.config")
    horizon = _count(config, "horizon_length")
    if "minibatch_size" in config:
        batch = num_envs * horizon
        minibatches = batch // fit_minibatch_size(_count(config, "minibatch_size"), batch)
    else:  # minibatch_size_per_env: rl_games' minibatch is num_envs x that
        minibatches = max(1, horizon // _count(config, "minibatch_size_per_env"))
    return _count(config, "mini_epochs") * minibatches


def _rsl_rl(cfg: Mapping[str, Any], obs: int, act: int) -> tuple[int, ...]:
    if "actor" in cfg:  # rsl-rl-lib 5.x: actor / critic models
        actor_dims = _layers(_get(cfg, "actor.hidden_dims"), "actor.hidden_dims")
        critic_dims = _layers(_get(cfg, "critic.hidden_dims"), "critic.hidden_dims")
    else:  # rsl-rl-lib <= 4: one `policy: ActorCritic` block
        actor_dims = _layers(_get(cfg, "policy.actor_hidden_dims"), "policy.actor_hidden_dims")
        critic_dims = _layers(_get(cfg, "policy.critic_hidden_dims"), "policy.critic_hidden_dims")
    actor = mlp_params([obs, *actor_dims, act]) + act  # + the action std (one per action)
    critic = mlp_params([obs, *critic_dims, 1])
    return (actor + critic,)  # rsl_rl reduces both networks' gradients in one buffer


def _rl_games(cfg: Mapping[str, Any], obs: int, act: int) -> tuple[int, ...]:
    network = _get(cfg, "params.network")
    units = _layers(_get(network, "mlp.units"), "params.network.mlp.units")
    fixed_sigma = bool((network.get("space") or {}).get("continuous", {}).get("fixed_sigma", True))
    trunks = 2 if network.get("separate") else 1  # separate: the critic has a trunk of its own
    sigma = act if fixed_sigma else units[-1] * act + act
    return (trunks * mlp_params([obs, *units]) + (units[-1] * act + act) + (units[-1] + 1) + sigma,)


def _skrl(cfg: Mapping[str, Any], obs: int, act: int, framework: str) -> tuple[int, ...]:
    def trunk(model: str) -> tuple[int, int]:
        network = _get(cfg, f"models.{model}.network")
        if not isinstance(network, Sequence) or not network or not isinstance(network[0], Mapping):
            raise ConfigShapeError(f"models.{model}.network is not a list of layers")
        layers = _layers(network[0].get("layers"), f"models.{model}.network[0].layers")
        return mlp_params([obs, *layers]), layers[-1]

    (policy_trunk, width), (value_trunk, value_width) = trunk("policy"), trunk("value")
    policy = policy_trunk + width * act + act + act  # + log_std (one per action)
    if framework == "torch" and not _get(cfg, "models").get("separate", True):
        return (policy + width + 1,)  # one shared model: the policy's trunk, both heads
    return (policy, value_trunk + value_width + 1)  # two models (always on JAX), reduced one by one in stock sync


def sync_work(
    lib: str, ml_framework: str, agent_cfg: Mapping[str, Any], *, observation_size: int, action_size: int,
    num_envs: int,
) -> SyncWork:  # fmt: skip
    """Updates per iteration and gradient sizes of ``lib``'s agent config; ConfigShapeError when the
    config does not have the keys this needs."""
    obs, act = observation_size, action_size
    updates = updates_per_iteration(lib, agent_cfg, num_envs)
    if lib == "rsl_rl":
        rollout, grads = _count(agent_cfg, "num_steps_per_env"), _rsl_rl(agent_cfg, obs, act)
    elif lib == "rl_games":
        rollout, grads = _count(agent_cfg, "params.config.horizon_length"), _rl_games(agent_cfg, obs, act)
    else:
        rollout, grads = _count(agent_cfg, "agent.rollouts"), _skrl(agent_cfg, obs, act, ml_framework)
    return SyncWork(label(lib, ml_framework), rollout, updates, grads, 2 * obs + 1)


def fused_sync_s(work: SyncWork, ranks: int, alpha_s: float, busbw_bytes_per_s: float) -> float:
    """Seconds per iteration the fused sync of ``work`` costs on ``ranks`` ranks (the ``nccl`` model:
    the ranks arrive together; waiting for a slower rank comes on top)."""
    return sum(
        count * allreduce_s(floats * FLOAT_BYTES, ranks, alpha_s, busbw_bytes_per_s) for count, floats in work.fused()
    )


def compute_for_efficiency(sync_s: float, efficiency: float) -> float:
    """The compute per iteration ``T`` at which ``T / (T + sync)`` reaches ``efficiency``."""
    return sync_s * efficiency / (1 - efficiency)
