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
  worker's group; its parameter broadcast sends tensors on each rank's device instead of a pickled
  state dict, which other ranks unpickled onto rank 0's GPU (``_broadcast_parameters``).
* **Device and ranks.** skrl's default device is ``cuda:LOCAL_RANK`` even on a CPU rank; we set
  ``skrl.config.torch`` from the RankContext.
* **Seed.** The Runner calls ``skrl.utils.set_seed(cfg["seed"])``, which adds the rank itself:
  we pass the base seed, so each rank ends seeded once with base + rank (what the worker used).
  The env keeps its own per-rank stream: skrl's wrapper would reseed it with key 0 at the first
  reset (``wrap_isaaclab_env``).
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
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from islab.libs._skrl_common import (
    EpisodeReturnMixin,
    SkrlAdapter,
    pooled_moments,
    runner_config,
    wrap_isaaclab_env,
)
from islab.libs.base import atomic_torch_save
from islab.libs.fused_sync import PrefetchedBatches, all_reduce_gradients_and, use_fused_sync


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

import skrl.agents.torch.ppo.ppo as skrl_ppo_module  # noqa: E402 -- only after the guarded import above
from skrl.agents.torch.ppo import PPO  # noqa: E402
from skrl.envs.wrappers.torch import wrap_env  # noqa: E402
from skrl.models.torch import Model  # noqa: E402
from skrl.resources.preprocessors.torch import RunningStandardScaler  # noqa: E402
from skrl.utils.runner.torch import Runner  # noqa: E402

from islab.libs.broadcast_state import broadcast_state_dicts  # noqa: E402


def _broadcast_parameters(self: Model, *, rank: int = 0) -> None:
    """skrl's ``Model.broadcast_parameters`` with the state dict's tensors broadcast in place, on
    this rank's device, instead of pickled onto rank 0's (islab.libs.broadcast_state)."""
    object_list = [self.state_dict()]
    broadcast_state_dicts(object_list, rank)
    self.load_state_dict(object_list[0])


Model.broadcast_parameters = _broadcast_parameters


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _local_row(mean: torch.Tensor, var: torch.Tensor, count: Any) -> torch.Tensor:
    """One rank's ``[mean (F), unbiased variance (F), count]`` in float64 (``pooled_moments``' rows)."""
    count_t = torch.tensor([float(count)], dtype=torch.float64, device=mean.device)
    return torch.cat([mean.reshape(-1).double(), var.reshape(-1).double(), count_t])


def _scaler_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The batch moments skrl 2.1.1's ``RunningStandardScaler._compute(x, train=True)`` takes."""
    if x.dim() == 3:
        return torch.mean(x, dim=(0, 1)), torch.var(x, dim=(0, 1)), x.shape[0] * x.shape[1]
    return torch.mean(x, dim=0), torch.var(x, dim=0), x.shape[0]


class SyncedRunningStandardScaler(RunningStandardScaler):
    """skrl's RunningStandardScaler, but each training batch's mean/variance/count is pooled
    across all ranks (all_gather, combined in rank order) before the running update.

    Fused sync gathers the rows of all of an update's normalizer batches at once (``prefetched``:
    ``(local row, gathered rows)``); an update then takes the next entry, after checking that its
    local row is exactly the one this update computes, instead of making its own collective."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefetched = PrefetchedBatches("skrl")

    def _parallel_variance(self, input_mean: torch.Tensor, input_var: torch.Tensor, input_count: int) -> None:
        world_size = _world_size()
        if world_size > 1:
            local = _local_row(input_mean, input_var, input_count)
            if self.prefetched:
                rows = self.prefetched.take(local, torch.equal)
            else:
                gathered = [torch.empty_like(local) for _ in range(world_size)]
                dist.all_gather(gathered, local)
                rows = torch.stack(gathered)
            input_mean, input_var, count = pooled_moments(rows)
            input_count = count.reshape(())
        super()._parallel_variance(input_mean, input_var, input_count)


class TrackedPPO(EpisodeReturnMixin, PPO):
    """skrl's PPO that also remembers recent episode returns on every rank, writes its periodic
    checkpoints atomically and, with fused sync, makes one collective per minibatch.

    Fused sync (``islab.libs.fused_sync``). Stock skrl makes per minibatch a gradient all-reduce
    (two with separate policy and value models), per epoch a KL all-reduce, and our synced scalers
    one all_gather per normalizer update (values, returns, each minibatch of the first epoch). Here:

    * the policy's ``reduce_parameters`` packs the gradients of both models and this minibatch's KL
      (skrl's formula on the same log-probabilities, recorded from ``policy.act``) into one
      all-reduce; the value model's call does nothing;
    * the epoch's KL all-reduce is answered from those sums (``_FusedKlTorch``), so every rank's
      KLAdaptiveLR steps with the same global KL, as in stock skrl, without a collective;
    * right after GAE (``compute_gae``, patched below), the moments of every normalizer batch of the
      update are gathered at once; the first epoch's minibatches are drawn under ``fork_rng``, so
      skrl's own draw afterwards gives the same permutation.
    """

    fused_sync = False  # set by the adapter

    def update(self, *, timestep: int, timesteps: int) -> None:
        if not self.fused_sync:
            super().update(timestep=timestep, timesteps=timesteps)
            return
        self._fused_kl_sums: list[torch.Tensor] = []
        policy, memory = self.policy, self.memory
        act, sample = policy.act, memory.sample
        batches: list[list[torch.Tensor]] = []
        log_prob_index = self._tensors_names.index("log_prob")
        actions_index = self._tensors_names.index("actions")

        def recording_sample(*args: Any, **kwargs: Any) -> list[list[torch.Tensor]]:
            batches[:] = sample(*args, **kwargs)
            return batches

        def recording_act(inputs: dict, *args: Any, **kwargs: Any) -> Any:
            result = act(inputs, *args, **kwargs)
            taken = inputs.get("taken_actions")
            if taken is not None:
                batch = next(b for b in batches if b[actions_index] is taken)
                self._fused_log_probs = (result[1]["log_prob"].detach(), batch[log_prob_index])
            return result

        policy.act, memory.sample = recording_act, recording_sample
        policy.reduce_parameters = self._fused_reduce
        if self.value is not policy:
            self.value.reduce_parameters = lambda: None  # its gradients ride with the policy's
        _ACTIVE.append(self)
        try:
            super().update(timestep=timestep, timesteps=timesteps)
        finally:
            _ACTIVE.remove(self)
            for owner, name in ((policy, "act"), (memory, "sample"), (policy, "reduce_parameters")):
                owner.__dict__.pop(name, None)
            self.value.__dict__.pop("reduce_parameters", None)
            for scaler in self._synced_scalers():
                scaler.prefetched.reset()

    def _fused_reduce(self) -> None:
        with torch.no_grad():  # skrl's approximate KL of this minibatch
            next_log_prob, sampled_log_prob = self._fused_log_probs
            ratio = next_log_prob - sampled_log_prob
            kl = ((torch.exp(ratio) - 1) - ratio).mean()
        models = [self.policy] if self.value is self.policy else [self.policy, self.value]
        grads = [p.grad for model in models for p in model.parameters() if p.grad is not None]
        self._fused_kl_sums.append(all_reduce_gradients_and(grads, [kl], _world_size())[0])

    def _fused_epoch_kl(self, tensor: torch.Tensor) -> None:
        """In place of the epoch's KL all-reduce: the sum over ranks of the epoch's mean KL."""
        tensor.copy_(torch.stack(self._fused_kl_sums).mean())
        self._fused_kl_sums.clear()

    def _synced_scalers(self) -> list[SyncedRunningStandardScaler]:
        names = ("_observation_preprocessor", "_state_preprocessor", "_value_preprocessor")
        found = [getattr(self, name, None) for name in names]
        return [s for s in found if isinstance(s, SyncedRunningStandardScaler)]

    def _prefetch_normalizer_moments(self, values: torch.Tensor, returns: torch.Tensor) -> None:
        entries: list[tuple[SyncedRunningStandardScaler, torch.Tensor]] = []
        if isinstance(self._value_preprocessor, SyncedRunningStandardScaler):
            entries += [(self._value_preprocessor, values), (self._value_preprocessor, returns)]
        for name, scaler in (("observations", self._observation_preprocessor), ("states", self._state_preprocessor)):
            if isinstance(scaler, SyncedRunningStandardScaler) and name in self._tensors_names:
                with torch.random.fork_rng(devices=[]):  # skrl draws the same permutation next
                    batches = self.memory.sample(
                        names=[name], batch_size=len(self.memory), mini_batches=self.cfg.mini_batches
                    )
                entries += [(scaler, batch[0]) for batch in batches]
        if not entries:
            return
        rows = [_local_row(*_scaler_moments(x)) for _, x in entries]
        flat = torch.cat(rows)
        gathered = [torch.empty_like(flat) for _ in range(_world_size())]
        dist.all_gather(gathered, flat)
        table = torch.stack(gathered)
        for scaler in self._synced_scalers():
            scaler.prefetched.reset()
        offset = 0
        for (scaler, _), row in zip(entries, rows, strict=True):
            scaler.prefetched.add(row, table[:, offset : offset + row.numel()])
            offset += row.numel()

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


# -- fused sync: the two module-level hooks in skrl's torch PPO module (active only inside a
# fused TrackedPPO.update; otherwise they pass straight through) ---------------------------------
_ACTIVE: list[TrackedPPO] = []
_compute_gae = skrl_ppo_module.compute_gae


def _compute_gae_then_prefetch(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    returns, advantages = _compute_gae(*args, **kwargs)
    if _ACTIVE:
        _ACTIVE[-1]._prefetch_normalizer_moments(kwargs["values"], returns)
    return returns, advantages


class _FusedKlDistributed(ModuleType):
    """``torch.distributed`` as skrl's PPO module sees it: its one call, the epoch's KL all-reduce,
    is answered from the fused per-minibatch sums while a fused update runs."""

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    @staticmethod
    def all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not _ACTIVE:
            return dist.all_reduce(tensor, *args, **kwargs)
        _ACTIVE[-1]._fused_epoch_kl(tensor)
        return None


class _FusedKlTorch(ModuleType):
    """The ``torch`` that skrl's PPO module sees: the real one but for ``torch.distributed``."""

    distributed = _FusedKlDistributed("torch.distributed")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


skrl_ppo_module.compute_gae = _compute_gae_then_prefetch
skrl_ppo_module.torch = _FusedKlTorch("torch")


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
        runner = IslabRunner(wrap_isaaclab_env(wrap_env, self.env), cfg)
        self.fused_sync = use_fused_sync(ctx.distributed) and isinstance(runner.agent, TrackedPPO)
        if self.fused_sync:
            runner.agent.fused_sync = True
        return runner

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
