"""The deployable policy: raw observations in, the actions ``env.step`` receives out.

Each library splits inference differently: rl_games clips observations in its env wrapper,
normalizes them inside the model, then clamps the mean to [-1, 1] and rescales it to the action
space in the agent; rsl_rl normalizes inside the actor; skrl applies an observation preprocessor
in the agent and clips the mean in the model. A deployed controller must do all of it, in
order, with the statistics frozen at the checkpoint. :class:`DeterministicPolicy` is that chain
as one plain torch module::

    observations -> [clip to +-c] -> [normalize: (x - mean) / denominator, clip] -> body
                 -> [clamp to [low, high]] -> [scale * a + offset] -> actions

Each adapter's ``inference_module()`` fills in the parts from its own modules (copied to the CPU,
in eval mode); the normalizer's ``denominator`` is computed with the library's own formula, so the
result equals the library's inference to float32 rounding. The module holds no Python branches
that depend on data, so ``torch.jit.trace`` and the ONNX exporter see the same graph for any batch.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class ObservationNormalizer(nn.Module):
    """``(x - mean) / denominator``, then clipped to ``[-clip, clip]`` when ``clip`` is given.
    The statistics are frozen buffers (they travel with the TorchScript and ONNX files)."""

    def __init__(self, mean: torch.Tensor, denominator: torch.Tensor, clip: float | None = None) -> None:
        super().__init__()
        self.register_buffer("mean", mean.detach().to("cpu", torch.float32).clone())
        self.register_buffer("denominator", denominator.detach().to("cpu", torch.float32).clone())
        self.clip = None if clip is None else float(clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x - self.mean) / self.denominator
        return y if self.clip is None else torch.clamp(y, -self.clip, self.clip)


class DeterministicPolicy(nn.Module):
    """The chain in the module docstring; every stage but ``body`` is optional."""

    def __init__(
        self,
        body: nn.Module,
        *,
        normalizer: nn.Module | None = None,
        observation_clip: float | None = None,
        action_low: float | None = None,
        action_high: float | None = None,
        action_scale: float | torch.Tensor | None = None,
        action_offset: float | torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.observation_clip = observation_clip
        self.normalizer = normalizer
        self.body = body
        self.action_low, self.action_high = action_low, action_high
        # per-dimension scale/offset (rl_games' rescale from the action space) travel as buffers
        for name, value in (("action_scale", action_scale), ("action_offset", action_offset)):
            if isinstance(value, torch.Tensor):
                self.register_buffer(name, value.detach().to("cpu", torch.float32).clone())
            else:
                setattr(self, name, value)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        x = observations
        if self.observation_clip is not None:
            x = torch.clamp(x, -self.observation_clip, self.observation_clip)
        if self.normalizer is not None:
            x = self.normalizer(x)
        actions = self.body(x)
        if self.action_low is not None or self.action_high is not None:
            actions = torch.clamp(actions, self.action_low, self.action_high)
        if self.action_scale is not None:
            actions = actions * self.action_scale
        if self.action_offset is not None:
            actions = actions + self.action_offset
        return actions

    def describe(self) -> dict[str, Any]:
        """The stages as data, for ``policy.json``."""
        normalizer = self.normalizer
        return {
            "observation_clip": self.observation_clip,
            "observation_normalizer": None
            if normalizer is None
            else {"folded_in": True, "kind": type(normalizer).__name__, "clip": getattr(normalizer, "clip", None)},
            "action_clamp": None
            if self.action_low is None and self.action_high is None
            else [self.action_low, self.action_high],
            "action_scale": _plain(self.action_scale),
            "action_offset": _plain(self.action_offset),
        }


class SkrlPolicyMean(nn.Module):
    """The mean action of a skrl torch Gaussian policy model (``compute(..., role="policy")`` and
    the mixin's optional mean clipping), from already preprocessed observations."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = frozen_copy(model)
        clip = bool(getattr(model, "_g_clip_mean_actions", False))
        self.low = model._g_min_actions if clip else None
        self.high = model._g_max_actions if clip else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, _ = self.model.compute({"observations": x}, role="policy")
        if self.low is not None:
            mean = torch.clamp(mean, min=self.low, max=self.high)
        return mean


def frozen_copy(module: nn.Module) -> nn.Module:
    """A CPU copy in eval mode without gradients: the library's module keeps training untouched."""
    clone = copy.deepcopy(module).to("cpu").eval()
    for parameter in clone.parameters():
        parameter.requires_grad_(False)
    return clone


def skrl_normalizer(preprocessor: Any) -> ObservationNormalizer | None:
    """skrl's RunningStandardScaler (torch module or JAX object) with skrl's formula,
    ``clip((x - mean) / (sqrt(var) + eps), +-clip_threshold)``; None when there is none."""
    if preprocessor is None or not hasattr(preprocessor, "running_mean"):
        return None  # skrl's no-op preprocessor is a plain function
    mean = torch.as_tensor(_numpy(preprocessor.running_mean)).float()
    variance = torch.as_tensor(_numpy(preprocessor.running_variance)).float()
    return ObservationNormalizer(mean, torch.sqrt(variance) + preprocessor.epsilon, preprocessor.clip_threshold)


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, torch.Tensor) else value


def _numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    import numpy as np

    return np.array(value)
