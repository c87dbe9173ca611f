"""Build one library adapter in-process, as a single rank on CPU (shared by the adapter tests)."""

from __future__ import annotations

from pathlib import Path

import torch

from islab.envs import make_env
from islab.libs import load_adapter
from islab.libs.base import LibraryAdapter
from islab.spec.agent_config import load_agent_config
from islab.worker.context import RankContext, configure_process

TASK = "Islab-Cartpole-v0"


def jax_on_cpu() -> None:
    """JAX on the CPU in this process, as ``JAX_PLATFORMS=cpu`` does for the worker's CPU ranks, but
    through JAX's config: setting the variable in ``os.environ`` would leak into every process the
    later tests of the session start (a skrl-JAX rank meant for a GPU would then get the CPU)."""
    import jax

    jax.config.update("jax_platforms", "cpu")


def single_rank(seed: int) -> RankContext:
    return RankContext.from_environ("cpu", seed, environ={})


def build_adapter(
    lib: str,
    run_dir: Path,
    *,
    framework: str = "torch",
    num_envs: int = 16,
    seed: int = 0,
    overrides: tuple[str, ...] = (),
) -> LibraryAdapter:
    if framework == "jax":
        jax_on_cpu()
    ctx = single_rank(seed)
    configure_process(ctx)  # seeds torch: the policy's initial weights depend on the seed
    # One intra-op thread: with two on this 2-core machine, shared with other jobs, OpenMP's
    # waiting threads slowed the same run from ~2 s to ~45 s (measured); one thread stays fast.
    torch.set_num_threads(1)
    env = make_env(TASK, num_envs, ctx.device, seed=ctx.seed)
    return load_adapter(lib, framework)(ctx, env, load_agent_config(lib, TASK, overrides), run_dir)
