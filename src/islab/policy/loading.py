"""Rebuild a run's trained policy in one process: env + library adapter + checkpoint.

The same objects the training built, from what the run directory stored: the task and library
from ``spec.yaml``, the agent config from ``agent.yaml``, and the islab checkpoint's
``library`` entry loaded with the adapter's own ``load_library_state`` (what ``--resume`` does).
The module's import is torch-free (the command line takes :func:`job_free_environment` from here).
The process is rank 0 of a world of 1, whatever job it may run inside (the job's rank variables
are dropped, or skrl would join a process group at import). The library writes whatever it
writes at start-up (TensorBoard writers, experiment folders) into a scratch directory that is
removed afterwards, never into the run directory.

The policy's digest after loading must equal the one the checkpoint recorded, as on resume: a
play or export of a policy that did not load exactly is refused.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from islab import rundir
from islab.libs.registry import apply_env_fixes
from islab.policy.source import PolicySource
from islab.spec.launch_rules import JOB_VARIABLES
from islab.spec.worker_args import default_of

if TYPE_CHECKING:
    from islab.envs.base import DirectRLEnv
    from islab.libs.base import LibraryAdapter


class PolicyLoadError(Exception):
    """The checkpoint or device cannot be used; ``field`` names the option to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class LoadedPolicy:
    source: PolicySource
    adapter: LibraryAdapter
    env: DirectRLEnv
    iteration: int
    policy_sha256: str
    _scratch: tempfile.TemporaryDirectory = field(repr=False)

    def close(self) -> None:
        self.env.close()
        self._scratch.cleanup()


def job_free_environment(environ: dict[str, str], lib: str, ml_framework: str, device: str) -> dict[str, str]:
    """``environ`` without the job's rank variables, with the library's fixes (the user's values win)."""
    env = {name: value for name, value in environ.items() if name not in JOB_VARIABLES}
    apply_env_fixes(lib, ml_framework, device, env)
    return env


def read_agent_config(run_dir: Path) -> dict[str, Any]:
    import yaml

    agent_cfg = yaml.safe_load(Path(run_dir, rundir.AGENT_FILE).read_text(encoding="utf-8"))
    if not isinstance(agent_cfg, dict):
        raise PolicyLoadError("RUN_DIR", f"{Path(run_dir, rundir.AGENT_FILE)} holds no agent config")
    return agent_cfg


def load_policy(
    source: PolicySource,
    *,
    device: str = "cpu",
    num_envs: int = 1,
    seed: int | None = None,
    render_mode: str | None = None,
    viewer: Any = None,
) -> LoadedPolicy:
    """Build the env (``num_envs``; ``render_mode``/``viewer`` as ``islab.envs.make_env`` takes them)
    and the adapter on ``device`` and load the checkpoint into it."""
    os.environ.update(job_free_environment(dict(os.environ), source.lib, source.ml_framework, device))
    for name in JOB_VARIABLES:
        os.environ.pop(name, None)

    import torch

    from islab.envs import make_env
    from islab.libs import load_adapter
    from islab.libs.base import state_digest
    from islab.worker.checkpoint import CheckpointError, check_compatible, from_bytes, identity
    from islab.worker.context import RankContext, configure_process, resolve_device

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PolicyLoadError("--device", "cuda is not available on this machine. Use --device cpu")
    base_seed = int(source.spec.get("seed", default_of("seed")) if seed is None else seed)
    ctx = RankContext(
        rank=0, local_rank=0, world_size=1, local_world_size=1, device=resolve_device(device, 0),
        backend="nccl" if device.startswith("cuda") else "gloo", base_seed=base_seed, launcher="single",
    )  # fmt: skip
    configure_process(ctx)
    try:
        checkpoint = from_bytes(source.checkpoint.read_bytes(), str(source.checkpoint))
    except (OSError, CheckpointError) as error:
        raise PolicyLoadError("--checkpoint", str(error).removeprefix("resume: ")) from error
    agent_cfg = read_agent_config(source.run_dir)
    adapter_class = load_adapter(source.lib, source.ml_framework)
    env = make_env(source.task, num_envs, ctx.device, seed=ctx.seed, render_mode=render_mode, viewer=viewer)
    run = identity(
        source.lib, source.ml_framework, source.task, env.single_observation_space["policy"].shape,
        env.single_action_space.shape,
    )  # fmt: skip
    try:
        check_compatible(checkpoint, run, str(source.checkpoint))
    except CheckpointError as error:
        env.close()
        raise PolicyLoadError("--checkpoint", str(error).removeprefix("resume: ")) from error
    scratch = tempfile.TemporaryDirectory(prefix="islab-policy-")
    # The libraries print their model summaries while they build; play --json must print JSON only.
    with contextlib.redirect_stdout(io.StringIO()):
        adapter = adapter_class(ctx, env, agent_cfg, Path(scratch.name, "run"))
        adapter.load_library_state(checkpoint["library"])
    adapter.iteration = int(checkpoint["iteration"])
    digest = state_digest(adapter.policy_state())
    if digest != checkpoint["policy_sha256"]:
        scratch.cleanup()
        raise PolicyLoadError(
            "--checkpoint",
            f"the policy loaded from {source.checkpoint} (sha256 {digest[:12]}) differs from the one saved "
            f"({checkpoint['policy_sha256'][:12]}); this library version cannot read it",
        )
    return LoadedPolicy(source, adapter, env, adapter.iteration, digest, scratch)
