"""SWEEP.yaml: the schema of a sweep (strict: unknown keys and wrong types are errors).

::

    name: cartpole-lr         # optional; default: the file's stem. The sweep directory is
                              # <log_dir>/sweeps/<name>/<time>/
    run:                      # the base run: any cluster-spec field, or `cluster: path` (+ fields on top)
      lib: rsl_rl
      device: cpu
      num_envs: 256
      max_iterations: 40
    seeds: 3                  # 1, 2, 3; or a list [1, 2, 3]. Every configuration runs with every seed
    search:                   # agent-config overrides (the keys of KEY=VALUE on the command line)
      algorithm.learning_rate: [1.0e-4, 3.0e-4, 1.0e-3]        # a list: a grid axis
      algorithm.entropy_coef: {loguniform: [1.0e-4, 1.0e-2]}   # uniform, loguniform, randint, choice
    samples: 8                # draws from the distributions (per grid point with searcher grid)
    searcher: grid            # grid | random | optuna
    metric: {name: mean_return, mode: max, over_last: 10}
    trials_per_gpu: 2         # GPU trials share a GPU: nproc_per_node / trials_per_gpu GPUs each
    cpus_per_trial: 1         # CPU trials: cores each (threads per rank follow)
    max_concurrent: 4         # at most this many trials at once (default: what the resources allow)
    scheduler: none           # none | asha (stops weak trials early, on the metric)

This module only describes the shape. What needs the disk or the machine (the run's spec, the agent
config's keys, whether a trial fits the resources) is checked in :mod:`islab.sweep.load`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from islab.spec.issues import rule

DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")
SEARCHERS = ("grid", "random", "optuna")
SCHEDULERS = ("none", "asha")
# The fields the sweep sets on every trial itself: a value in `run:` would be silently replaced.
SWEEP_OWNED_RUN_FIELDS = {
    "seed": "Give the seeds with the sweep's `seeds:` key",
    "log_dir": "Give the sweep's `log_dir:` instead; each trial's run directory lies under the sweep directory",
    "run_name": "The sweep names each trial's run directory after the trial",
    "resume": "Continue a sweep with islab-train sweep --resume SWEEP_DIR",
    "node_rank": "A trial is a one-node job; Ray places it on a node",
    "nnodes": "A trial is a one-node job (several ranks with nproc_per_node); Ray places it on a node",
}

Number = StrictInt | StrictFloat
Scalar = StrictInt | StrictFloat | StrictStr | StrictBool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Distribution(_Strict):
    """One of ``{uniform: [low, high]}``, ``{loguniform: [low, high]}``, ``{randint: [low, high]}``
    (integers, ``high`` excluded, as in Ray Tune) or ``{choice: [a, b, ...]}``."""

    uniform: tuple[Number, Number] | None = None
    loguniform: tuple[Number, Number] | None = None
    randint: tuple[StrictInt, StrictInt] | None = None
    choice: Annotated[list[Scalar], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one_kind_with_sane_bounds(self) -> Distribution:
        given = [kind for kind in DISTRIBUTIONS if getattr(self, kind) is not None]
        if len(given) != 1:
            raise rule(
                "distribution",
                f"needs exactly one of {', '.join(DISTRIBUTIONS)}, got {given or 'none'}",
                "Write e.g. {loguniform: [1.0e-4, 1.0e-2]}",
            )
        kind = given[0]
        if kind == "choice":
            return self
        low, high = getattr(self, kind)
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise rule(
                kind,
                f"bounds [{low}, {high}]: low must be below high (both finite)",
                f"Write {{{kind}: [LOW, HIGH]}} with LOW < HIGH",
            )
        if kind == "loguniform" and low <= 0:
            raise rule(
                kind,
                f"bounds [{low}, {high}]: a log-uniform range must be positive",
                "Give LOW > 0, e.g. {loguniform: [1.0e-5, 1.0e-2]}",
            )
        return self

    @property
    def kind(self) -> str:
        return next(kind for kind in DISTRIBUTIONS if getattr(self, kind) is not None)

    @property
    def bounds(self) -> tuple[Any, ...]:
        return tuple(getattr(self, self.kind))

    def describe(self) -> str:
        return f"{self.kind}{list(self.bounds)}"


SearchSpace = Annotated[list[Scalar], Field(min_length=1)] | Distribution


class Metric(_Strict):
    """The number a trial is judged by: ``name`` in its progress records (mean_return by default),
    averaged over its last ``over_last`` iterations; ``mode`` says whether higher is better."""

    name: StrictStr = "mean_return"
    mode: Literal["max", "min"] = "max"
    over_last: Annotated[StrictInt, Field(ge=1)] = 10


class Asha(_Strict):
    """ASHA's knobs: a trial runs at least ``grace_period`` iterations before it can be stopped;
    at each rung only the best 1/``reduction_factor`` go on."""

    grace_period: Annotated[StrictInt, Field(ge=1)] = 5
    reduction_factor: Annotated[Number, Field(gt=1)] = 2


class RayCluster(_Strict):
    """``address``: an existing Ray cluster (``HOST:PORT`` of its head, or ``auto``); None: an
    embedded Ray on this machine, started for the sweep and stopped at its end."""

    address: StrictStr | None = None


class SweepSpec(_Strict):
    """A whole SWEEP.yaml, validated."""

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9._-]+$")] | None = None
    run: dict[StrictStr, Any]
    seeds: (
        Annotated[StrictInt, Field(ge=1)] | Annotated[list[Annotated[StrictInt, Field(ge=0)]], Field(min_length=1)]
    ) = 1
    search: dict[StrictStr, SearchSpace] = Field(default_factory=dict)
    samples: Annotated[StrictInt, Field(ge=1)] | None = None
    searcher: Literal["grid", "random", "optuna"] = "grid"
    search_seed: Annotated[StrictInt, Field(ge=0)] = 0
    metric: Metric = Field(default_factory=Metric)
    trials_per_gpu: Annotated[Number, Field(gt=0)] = 1
    cpus_per_trial: Annotated[Number, Field(gt=0)] = 1
    max_concurrent: Annotated[StrictInt, Field(ge=1)] | None = None
    scheduler: Literal["none", "asha"] = "none"
    asha: Asha = Field(default_factory=Asha)
    ray: RayCluster = Field(default_factory=RayCluster)
    log_dir: StrictStr = "logs"

    @model_validator(mode="after")
    def _cross_field_rules(self) -> SweepSpec:
        for owned, fix in SWEEP_OWNED_RUN_FIELDS.items():
            if owned in self.run:
                raise rule(f"run.{owned}", "is set by the sweep for every trial", fix)
        if isinstance(self.seeds, list) and len(set(self.seeds)) != len(self.seeds):
            raise rule("seeds", f"{self.seeds} repeats a seed", "List each seed once")
        for key in self.search:
            if (
                not key.lstrip("+")
                or key.startswith("-")
                or "=" in key
                or any(not p for p in key.lstrip("+").split("."))
            ):
                raise rule(
                    f"search.{key}",
                    "is not a dotted agent-config key",
                    "Use the key of a KEY=VALUE override, e.g. algorithm.learning_rate",
                )
        has_distributions = any(isinstance(space, Distribution) for space in self.search.values())
        if self.searcher in ("random", "optuna") and not self.search:
            raise rule(
                "searcher",
                f"{self.searcher} needs a `search:` space",
                "Add search keys, or use searcher: grid for seeds only",
            )
        if self.samples is not None and self.searcher == "grid" and not has_distributions:
            raise rule(
                "samples",
                "a pure grid (lists only) runs every combination once, so samples has no meaning",
                "Remove samples, or give a distribution such as {uniform: [0.1, 0.9]}",
            )
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(1, self.seeds + 1)) if isinstance(self.seeds, int) else list(self.seeds)
