"""skrl (torch) behind ``LibraryAdapter``: Isaac Lab's skrl YAML, skrl's Runner, PPO, SequentialTrainer.

What skrl expects, and what this module does about it:

* **Environment.** Our env has Isaac Lab's DirectRLEnv shape, so skrl's stock
  ``wrap_env(env, wrapper="isaaclab")`` takes it as is (observations under ``"policy"``, the
  trainer logs ``extras["log"]``).
* **Distributed at import time.** ``import skrl`` reads LOCAL_RANK/RANK/WORLD_SIZE and, when
  WORLD_SIZE > 1, calls ``torch.distributed.init_process_group("nccl")`` and
  ``torch.cuda.set_device`` right there. The worker has already joined the group (gloo on CPU,
  NCCL on GPU); a second init raises, and NCCL/CUDA do not exist on a CPU rank. So, only while
  ``import skrl`` runs and only when a group exists, both calls are no-ops (``_skrl_imported``).
  skrl's own distributed code (parameter broadcast, gradient and KL all-reduce) then runs on the
  worker's group unchanged.
* **Device and ranks.** skrl's default device is ``cuda:LOCAL_RANK`` even on a CPU rank; we set
  ``skrl.config.torch`` from the RankContext.
* **Seed.** The Runner calls ``skrl.utils.set_seed(cfg["seed"])``, which adds the rank itself:
  we pass the base seed, so each rank ends seeded once with base + rank (what the worker used).
* **Normalizer drift.** skrl's RunningStandardScaler learns from each rank's own data, so the
  ranks' observation normalizers drift apart (0.019 measured) and so do their policies' inputs.
  ``SyncedRunningStandardScaler`` pools each batch's statistics across ranks before updating,
  so every rank applies the same update and holds the same bits.
* **Resume.** ``library_state`` is skrl's checkpoint modules plus the LR scheduler; skrl's own
  periodic ``agent_<timestep>.pt`` files are written atomically too (``TrackedPPO``).
* **Output.** The experiment directory is the run directory (skrl's default timestamp differs
  per rank); skrl writes TensorBoard and checkpoints on rank 0 only; the final checkpoint is
  written atomically and loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from islab.libs._skrl_common import EpisodeReturnMixin, SkrlAdapter, pooled_moments, runner_config
from islab.libs.base import atomic_torch_save


@contextlib.contextmanager
def _skrl_imported() -> Iterator[None]:
    """Import skrl with its import-time ``init_process_group`` / ``cuda.set_device`` disabled when
    the worker has already joined a process group; restore both afterwards."""
    if "skrl" in sys.modules or not (dist.is_available() and dist.is_initialized()):
        yield  # nothing to guard: skrl is loaded already, or it may set up the group itself
        return
    init_process_group, set_device = dist.init_process_group, torch.cuda.set_device
    dist.init_process_group = lambda *args, **kwargs: None
    torch.cuda.set_device = lambda *args, **kwargs: None  # the worker already picked the GPU
    try:
        yield
    finally:
        dist.init_process_group, torch.cuda.set_device = init_process_group, set_device


with _skrl_imported():
    import skrl

from skrl.agents.torch.ppo import PPO  # noqa: E402 -- only after the guarded import above
from skrl.envs.wrappers.torch import wrap_env  # noqa: E402
from skrl.resources.preprocessors.torch import RunningStandardScaler  # noqa: E402
from skrl.utils.runner.torch import Runner  # noqa: E402


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class SyncedRunningStandardScaler(RunningStandardScaler):
    """skrl's RunningStandardScaler, but each training batch's mean/variance/count is pooled
    across all ranks (all_gather, combined in rank order) before the running update."""

    def _parallel_variance(self, input_mean: torch.Tensor, input_var: torch.Tensor, input_count: int) -> None:
        world_size = _world_size()
        if world_size > 1:
            local = torch.cat(
                [
                    input_mean.reshape(-1).double(),
                    input_var.reshape(-1).double(),
                    torch.tensor([float(input_count)], dtype=torch.float64, device=input_mean.device),
                ]
            )
            rows = [torch.empty_like(local) for _ in range(world_size)]
            dist.all_gather(rows, local)
            input_mean, input_var, count = pooled_moments(torch.stack(rows))
            input_count = count.reshape(())
        super()._parallel_variance(input_mean, input_var, input_count)


class TrackedPPO(EpisodeReturnMixin, PPO):
    """skrl's PPO that also remembers recent episode returns on every rank, and writes its
    periodic checkpoints atomically."""

    def write_checkpoint(self, *, timestep: int, timesteps: int) -> None:
        """skrl 2.1.1's ``write_checkpoint`` (whole-agent layout) with ``atomic_torch_save`` for its
        plain ``torch.save``: a rank killed mid-write must not leave a truncated agent_<t>.pt."""
        if self.cfg.experiment.store_separately:
            super().write_checkpoint(timestep=timestep, timesteps=timesteps)
            return
        directory = Path(self.experiment_dir) / "checkpoints"
        modules = {name: self._get_internal_value(module) for name, module in self.checkpoint_modules.items()}
        atomic_torch_save(modules, directory / f"agent_{timestep}.pt")
        best = self.checkpoint_best_modules
        if best["modules"] and not best["saved"]:
            best_modules = {name: best["modules"][name] for name in self.checkpoint_modules}
            atomic_torch_save(best_modules, directory / "best_agent.pt")
            best["saved"] = True


class IslabRunner(Runner):
    """skrl's Runner, building ``TrackedPPO`` where the YAML says ``PPO``."""

    def _component(self, name: str) -> type:
        return TrackedPPO if name.lower() == "ppo" else super()._component(name)


class SkrlTorchAdapter(SkrlAdapter):
    name = "skrl"
    checkpoint_suffix = ".pt"

    def _build_runner(self) -> IslabRunner:
        ctx = self.ctx
        # skrl read these from the environment at import; make them agree with the worker's view.
        skrl.config.torch.device = torch.device(ctx.device)
        skrl.config.torch._local_rank = ctx.local_rank
        skrl.config.torch._rank = ctx.rank
        skrl.config.torch._world_size = ctx.world_size
        skrl.config.torch._is_distributed = ctx.distributed
        if ctx.distributed and not dist.is_initialized():
            raise RuntimeError("skrl-torch with world_size > 1 needs the worker's process group first")
        cfg = runner_config(
            self.agent_cfg, base_seed=ctx.base_seed, run_dir=self.run_dir, scaler_class=SyncedRunningStandardScaler
        )
        return IslabRunner(wrap_env(self.env, wrapper="isaaclab"), cfg)

    def _modules(self) -> dict[str, Any]:
        return self.agent.checkpoint_modules

    def save(self, path: Path) -> None:
        """skrl's own checkpoint layout ({module name: state_dict}), written atomically."""
        atomic_torch_save({name: module.state_dict() for name, module in self._modules().items()}, Path(path))

    def load(self, path: Path) -> None:
        state = torch.load(Path(path), map_location=self.ctx.device, weights_only=True)
        for name, module in self._modules().items():
            module.load_state_dict(state[name])

    def library_state(self) -> dict[str, Any]:
        """skrl's checkpoint modules (policy, value, optimizer, preprocessors) and the learning-rate
        scheduler's state, which skrl does not save (the rate itself is in the optimizer)."""
        state: dict[str, Any] = {name: module.state_dict() for name, module in self._modules().items()}
        scheduler = getattr(self.agent, "scheduler", None)
        state["scheduler"] = scheduler.state_dict() if scheduler is not None else None
        return state

    def load_library_state(self, state: dict[str, Any]) -> None:
        for name, module in self._modules().items():
            module.load_state_dict(state[name])
        scheduler = getattr(self.agent, "scheduler", None)
        if scheduler is not None and state.get("scheduler") is not None:
            scheduler.load_state_dict(state["scheduler"])

    def policy_state(self) -> dict[str, torch.Tensor]:
        state = {f"policy.{key}": value for key, value in self.agent.policy.state_dict().items()}
        preprocessor = self._modules().get("observation_preprocessor")
        if preprocessor is not None:
            state.update({f"observation_preprocessor.{k}": v for k, v in preprocessor.state_dict().items()})
        return state

    def deterministic_actions(self, observations: torch.Tensor) -> torch.Tensor:
        # what skrl's trainer does in eval: act, then take the mean instead of the sample
        self.agent.enable_training_mode(False, apply_to_models=True)
        with torch.no_grad():
            _, outputs = self.agent.act(observations, None, timestep=0, timesteps=0)
        return outputs["mean_actions"]

    def inference_module(self) -> torch.nn.Module:
        from islab.policy.modules import DeterministicPolicy, SkrlPolicyMean, skrl_normalizer

        preprocessor = self._modules().get("observation_preprocessor")
        return DeterministicPolicy(SkrlPolicyMean(self.agent.policy), normalizer=skrl_normalizer(preprocessor))
