"""The trial plan (pure): configurations x seeds -> trials, each an ordinary islab-train command line.

A *configuration* is one value per ``search`` key; a *trial* is a configuration with one seed.
How the configurations are chosen depends on the searcher:

* ``grid``: every combination of the list-valued keys (the grid); each distribution is drawn once
  per configuration, ``samples`` configurations per grid point (Ray Tune's grid + num_samples);
* ``random``: ``samples`` configurations, every key drawn (a list is a uniform choice);
* ``optuna``: ``samples`` configurations chosen one after another by Optuna while the sweep runs,
  so the plan holds placeholders (``config`` empty) and the trainable fills them in.

Draws come from ``random.Random(search_seed)``: the same SWEEP.yaml gives the same plan, which is
what lets ``--resume`` find its trials again. A trial's command is ``islab-train`` with the base
run's fields as options (written by :func:`islab.cli.options.field_argv`, one writer for all), the
seed, the trial's log directory and the overrides as KEY=VALUE; the base run's ``env`` becomes
the process environment. So ``best.command`` in sweep.json is a line a user can paste.
"""

from __future__ import annotations

import itertools
import math
import random
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from islab.cli.options import field_argv
from islab.plan.dry_run import shell_line
from islab.spec.worker_args import THREADS_VARIABLE
from islab.sweep.schema import Distribution, SweepSpec

# How a trial runs islab-train: the interpreter that runs the sweep, as a module (no console
# script on PATH needed on a Ray worker node). Users read it as ``islab-train``.
CLI_MODULE = "islab.cli"
PROGRAM = "islab-train"
# The search key that chooses each trial's task (--task), as Isaac Lab's Ray tuner searches `--task`.
TASK_KEY = "task"
TRIALS_DIR = "trials"
SWEEPS_DIR = "sweeps"


@dataclass(frozen=True)
class Resources:
    """What Ray reserves for one trial."""

    cpu: float
    gpu: float

    def describe(self) -> str:
        parts = [f"{_number(self.cpu)} CPU"]
        if self.gpu:
            parts.append(f"{_number(self.gpu)} GPU")
        return " + ".join(parts)


@dataclass(frozen=True)
class Trial:
    """One islab-train run of the sweep. ``config`` is empty for an Optuna trial until Optuna
    chooses it (the trainable then builds the argv with :func:`trial_argv`)."""

    id: str
    config_index: int
    config: Mapping[str, Any]
    seed: int
    log_dir: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    # Where the trial runs: its log directory when its trainer writes under its working directory
    # (Isaac Lab's and mjlab's train: ./logs/<lib>/...), so trials never share a folder; None: the sweep's.
    cwd: str | None = None

    @property
    def command(self) -> str:
        """The line a user pastes: ``islab-train ...`` with the environment in front (and the
        ``cd`` into the trial's own working directory, when it has one)."""
        line = shell_line(user_argv(self.argv), self.env)
        return f"cd {shlex.quote(self.cwd)} && {line}" if self.cwd else line


@dataclass(frozen=True)
class SweepPlan:
    """Every trial of the sweep and how they share the machine."""

    sweep_dir: str
    trials: tuple[Trial, ...]
    resources: Resources
    max_concurrent: int | None
    searcher: str
    configs: int


def sweep_dir_for(spec: SweepSpec, name: str, stamp: str) -> str:
    """``<log_dir>/sweeps/<name>/<time>``."""
    return str(Path(spec.log_dir, SWEEPS_DIR, name, stamp))


def trial_id(config_index: int, seed: int) -> str:
    return f"c{config_index:02d}-s{seed}"


def resources_of(spec: SweepSpec, device: str, nproc_per_node: int) -> Resources:
    """CPU trials reserve ``cpus_per_trial`` cores; GPU trials ``nproc_per_node / trials_per_gpu``
    GPUs (a fraction packs several trials onto one GPU) and one core per rank."""
    if device == "cuda":
        return Resources(cpu=float(nproc_per_node), gpu=nproc_per_node / spec.trials_per_gpu)
    return Resources(cpu=float(spec.cpus_per_trial), gpu=0.0)


def draw(space: Distribution | list[Any], rng: random.Random) -> Any:
    """One value from a search space (a list counts as a uniform choice)."""
    if isinstance(space, list):
        return rng.choice(space)
    kind, bounds = space.kind, space.bounds
    if kind == "choice":
        return rng.choice(list(bounds))
    low, high = bounds
    if kind == "randint":
        return rng.randrange(low, high)
    value = math.exp(rng.uniform(math.log(low), math.log(high))) if kind == "loguniform" else rng.uniform(low, high)
    return float(f"{value:.4g}")  # short numbers in commands and tables; the grid is coarse anyway


def configurations(spec: SweepSpec) -> list[dict[str, Any]]:
    """The configurations of a grid or random search, in a fixed order (optuna: placeholders)."""
    rng = random.Random(spec.search_seed)
    if spec.searcher == "optuna":
        return [{} for _ in range(spec.samples or 1)]
    if spec.searcher == "random":
        return [{key: draw(space, rng) for key, space in spec.search.items()} for _ in range(spec.samples or 1)]
    axes = {key: space for key, space in spec.search.items() if isinstance(space, list)}
    drawn = {key: space for key, space in spec.search.items() if isinstance(space, Distribution)}
    samples = (spec.samples or 1) if drawn else 1
    configs = []
    for point in itertools.product(*axes.values()):
        for _ in range(samples):
            config = dict(zip(axes, point, strict=True))
            config.update({key: draw(space, rng) for key, space in drawn.items()})
            configs.append({key: config[key] for key in spec.search})  # keys in the file's order
    return configs


def override_text(key: str, value: Any) -> str:
    """``key=value`` that islab.spec.agent_config.parse_override reads back as the same value."""
    if isinstance(value, str):
        return f"{key}={value}"
    dumped = yaml.safe_dump(value, default_flow_style=True).strip()
    return f"{key}={dumped.removesuffix('...').strip()}"


def run_options(run: Mapping[str, Any], cluster_file: str | None) -> list[str]:
    """The base run's fields as islab-train options (``--lib rsl_rl --num-envs 64 ...``)."""
    args = ["--cluster", cluster_file] if cluster_file else []
    return args + field_argv({key: value for key, value in flatten_run(run).items() if key != "cluster"})


def flatten_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """``{rendezvous: {master_port: 1}}`` -> ``{"rendezvous.master_port": 1}`` (the option table's names)."""
    flat: dict[str, Any] = {}
    for key, value in run.items():
        if key in ("rendezvous", "entrypoint") and isinstance(value, Mapping):
            flat.update({f"{key}.{sub}": sub_value for sub, sub_value in value.items()})
        else:
            flat[key] = value
    return flat


def trial_argv(
    python: str,
    run: Mapping[str, Any],
    cluster_file: str | None,
    seed: int,
    log_dir: str,
    config: Mapping[str, Any],
    *,
    search_as_args: bool = False,
) -> tuple[str, ...]:
    """One trial's islab-train command line. The search key :data:`TASK_KEY` chooses ``--task``;
    every other key is an agent-config override: ``KEY=VALUE`` for our worker, or, with
    ``search_as_args`` (an entry point: Isaac Lab's train.py takes them as Hydra overrides), an
    argument after ``--``, following the run's own ``args``."""
    chosen = {key: value for key, value in config.items() if key != TASK_KEY}
    overrides = [override_text(key, value) for key, value in chosen.items()]
    if TASK_KEY in config:
        run = {**{key: value for key, value in run.items() if key != TASK_KEY}, TASK_KEY: config[TASK_KEY]}
    base_overrides = [str(item) for item in run.get("overrides") or ()]
    entry_args = [str(arg) for arg in run.get("args") or ()]
    if search_as_args:
        entry_args, overrides = [*entry_args, *overrides], []
    return (
        python,
        "-m",
        CLI_MODULE,
        *run_options(run, cluster_file),
        "--seed",
        str(seed),
        "--log-dir",
        log_dir,
        *base_overrides,
        *overrides,
        *(["--", *entry_args] if entry_args else []),
    )


def user_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """``python -m islab.cli ARGS`` -> ``islab-train ARGS`` (what a user types)."""
    return [PROGRAM, *argv[3:]] if list(argv[1:3]) == ["-m", CLI_MODULE] else list(argv)


def trial_env(spec: SweepSpec, run: Mapping[str, Any], device: str, nproc_per_node: int) -> dict[str, str]:
    """The base run's ``env`` plus, for CPU trials, the worker's threads per rank from cpus_per_trial
    (otherwise every trial would size its threads for the whole machine and they would fight)."""
    env = {str(name): str(value) for name, value in (run.get("env") or {}).items()}
    if device == "cpu" and THREADS_VARIABLE not in env:
        env[THREADS_VARIABLE] = str(max(1, int(spec.cpus_per_trial // nproc_per_node)))
    return env


def build_plan(
    spec: SweepSpec,
    *,
    sweep_dir: str,
    python: str,
    device: str,
    nproc_per_node: int,
    cluster_file: str | None,
    search_as_args: bool = False,
    own_cwd: bool = False,
) -> SweepPlan:
    """Every trial of the sweep: configurations in order, each with every seed. ``search_as_args``
    and ``own_cwd``: see :func:`trial_argv` and :attr:`Trial.cwd`."""
    env = trial_env(spec, spec.run, device, nproc_per_node)
    trials = []
    configs = configurations(spec)
    for index, config in enumerate(configs):
        for seed in spec.seed_list:
            ident = trial_id(index, seed)
            log_dir = str(Path(sweep_dir, TRIALS_DIR, ident))
            argv = trial_argv(python, spec.run, cluster_file, seed, log_dir, config, search_as_args=search_as_args)
            trials.append(Trial(ident, index, config, seed, log_dir, argv, env, log_dir if own_cwd else None))
    return SweepPlan(
        sweep_dir=sweep_dir,
        trials=tuple(trials),
        resources=resources_of(spec, device, nproc_per_node),
        max_concurrent=spec.max_concurrent,
        searcher=spec.searcher,
        configs=len(configs),
    )


def config_label(config: Mapping[str, Any]) -> str:
    """``learning_rate=0.001 entropy_coef=0.01``: the last part of each key, for tables."""
    return " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in config.items()) or "(base)"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
