"""The library registry: one row per RL library, read by every other part (torch-free).

A row says what the launcher, the doctor and the worker need to know about a library without
importing it: its pip distribution, the learner frameworks it has and which launcher starts each,
where its adapter class lives, where its agent config keeps the rollout length, and the
environment variables its ranks need. Adding a library is one module in ``islab.libs`` plus one
row here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from types import MappingProxyType

# rsl_rl imports GitPython at import time, which raises when no git binary is installed; set for
# every library's ranks (any of them may import rsl_rl through a shared environment).
COMMON_ENV = MappingProxyType({"GIT_PYTHON_REFRESH": "quiet"})
JAX_ENV = MappingProxyType(
    # JAX grabs ~75% of GPU memory at start and would starve the torch env on the same GPU.
    {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
)
JAX_CPU_ENV = MappingProxyType({"JAX_PLATFORMS": "cpu"})
# The [jax] extra installs plain jax: on Linux it has no GPU backend. GPU ranks need this instead,
# pinned to the jax version CI tests skrl-JAX with (.ci/constraints.txt; a test keeps the two equal).
JAX_TESTED_VERSION = "0.10.2"
JAX_CUDA_INSTALL = f'pip install "jax[cuda12]=={JAX_TESTED_VERSION}"'


@dataclass(frozen=True)
class Library:
    """One RL library. ``launchers``: framework -> ``"torchrun"`` | ``"skrl-jax"`` (the ONE place
    that decides which launcher starts the ranks); ``adapters``: framework -> ``"module:Class"``
    (imported only on a rank, by :func:`islab.libs.load_adapter`); ``rollout_key``: the
    agent-config path of the env steps one env collects per iteration (:mod:`islab.spec.budget`);
    ``framework_distributions``: pip distributions a framework adds (the doctor checks them)."""

    name: str
    distribution: str
    launchers: Mapping[str, str]
    adapters: Mapping[str, str]
    rollout_key: tuple[str, ...]
    framework_distributions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def distributions(self, ml_framework: str) -> tuple[str, ...]:
        """The pip distributions a rank of this library needs (the doctor checks them)."""
        return ("torch", self.distribution, *self.framework_distributions.get(ml_framework, ()))

    @property
    def frameworks(self) -> tuple[str, ...]:
        return tuple(self.launchers)

    @property
    def cfg_entry_point_key(self) -> str:
        """The gym.register kwarg naming this library's agent config (Isaac Lab's convention:
        ``"<lib>_cfg_entry_point": "<agents package>:<file>.yaml"``)."""
        return f"{self.name}_cfg_entry_point"


LIBRARIES: Mapping[str, Library] = MappingProxyType(
    {
        "rl_games": Library(
            "rl_games", "rl-games", {"torch": "torchrun"}, {"torch": "islab.libs.rl_games:RlGamesAdapter"},
            ("params", "config", "horizon_length"),
        ),
        "rsl_rl": Library(
            "rsl_rl", "rsl-rl-lib", {"torch": "torchrun"}, {"torch": "islab.libs.rsl_rl:RslRlAdapter"},
            ("num_steps_per_env",),
        ),
        "skrl": Library(
            "skrl", "skrl", {"torch": "torchrun", "jax": "skrl-jax"},
            {"torch": "islab.libs.skrl_torch:SkrlTorchAdapter", "jax": "islab.libs.skrl_jax:SkrlJaxAdapter"},
            ("agent", "rollouts"),  # torch and JAX share the file
            {"jax": ("jax", "jaxlib")},
        ),
    }
)  # fmt: skip


ML_FRAMEWORKS = ("torch", "jax")  # the --ml-framework choices, in help order


def frameworks_of(lib: str) -> tuple[str, ...]:
    return LIBRARIES[lib].frameworks if lib in LIBRARIES else ()


def launcher_of(lib: str, ml_framework: str) -> str | None:
    """``"torchrun"`` or ``"skrl-jax"``; None when the library has no such framework."""
    row = LIBRARIES.get(lib)
    return row.launchers.get(ml_framework) if row is not None else None


def adapter_module(lib: str, ml_framework: str) -> str:
    """The module of the adapter (what :func:`islab.libs.load_adapter` imports), without importing it."""
    return adapter_path(lib, ml_framework).partition(":")[0]


def adapter_path(lib: str, ml_framework: str) -> str:
    """``"module:Class"`` of the adapter; ValueError for a pair no library has."""
    row = LIBRARIES.get(lib)
    path = row.adapters.get(ml_framework) if row is not None else None
    if path is None:
        raise ValueError(f"no adapter for library {lib!r} with ml_framework {ml_framework!r}")
    return path


def env_fixes(lib: str, ml_framework: str, device: str) -> dict[str, str]:
    """What every rank of this library gets on top of the node's environment (the user's wins).
    The launcher puts them in the ranks' environment; the worker sets them again with
    ``setdefault`` for a rank started by hand."""
    env = dict(COMMON_ENV)
    if ml_framework == "jax":
        env.update(JAX_ENV)
        if device == "cpu":
            env.update(JAX_CPU_ENV)
    return env


def apply_env_fixes(
    lib: str, ml_framework: str = "torch", device: str = "cuda", environ: MutableMapping[str, str] | None = None
) -> None:
    """On a rank: set :func:`env_fixes` where the environment has no value yet (a rank started by
    hand, or an adapter module imported before the worker ran)."""
    target = os.environ if environ is None else environ
    for name, value in env_fixes(lib, ml_framework, device).items():
        target.setdefault(name, value)


def jax_backend_problem(device: str, backend: str | None) -> str | None:
    """Why a skrl-JAX rank on ``device`` must not train with JAX's ``backend``
    (``jax.default_backend()``; None: jax not importable), or None when it may. Without a GPU
    backend skrl only logs a warning and its learner runs on the CPU, many times slower, on a GPU node."""
    if not device.startswith("cuda") or backend == "gpu":
        return None
    return (
        f"--device cuda with skrl-JAX, but JAX's backend is {backend or 'unavailable'!r}, not 'gpu': "
        "the learner would train on the CPU"
    )


def jax_backend_fix(python: str = "the ranks' interpreter") -> str:
    return f"Install JAX with CUDA support ({JAX_CUDA_INSTALL}) into {python}, or use --device cpu"
