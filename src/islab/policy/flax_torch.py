"""skrl-JAX's policy as a torch module, so it exports like the others.

skrl builds its JAX and torch models from the same YAML section (``models.policy``: layers,
activations, output expression) with twin instantiators, and both name their layers the same
way: a container ``net_container`` of linear layers and activations, then ``output_layer``
(``log_std_parameter`` beside them). So the torch twin of a trained flax policy is skrl's torch
``gaussian_model`` built from the run's own YAML, with every flax param copied in:

    flax  net_container.layers_<i>.kernel [in, out]  ->  torch  net_container.<i>.weight [out, in]
    flax  net_container.layers_<i>.bias               ->  torch  net_container.<i>.bias
    flax  log_std_parameter                           ->  torch  log_std_parameter

(the output layer sits in the container, both sides, when the YAML's output is plain ACTIONS;
flax's ``nn.Sequential`` numbers its entries ``layers_<i>`` where torch's numbers them ``<i>``;
activations are entries without params in both.) A param on one side without its twin on the
other is an error, never a silent partial copy. Equivalence with skrl-JAX's own inference is what
``tests/policy/test_play_export.py`` checks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def flax_name(torch_name: str) -> str:
    """``net_container.0.weight`` -> ``net_container.layers_0.kernel``."""
    parts = torch_name.split(".")
    parts = [f"layers_{part}" if part.isdigit() else part for part in parts]
    if parts[-1] == "weight":
        parts[-1] = "kernel"
    return ".".join(parts)


def torch_policy_from_flax(
    policy_cfg: Mapping[str, Any], params: Any, observation_space: Any, action_space: Any
) -> torch.nn.Module:
    """skrl's torch Gaussian model for ``policy_cfg`` (the YAML's ``models.policy``) holding the
    flax ``params`` (the JAX model's ``state_dict.params``), on the CPU in eval mode."""
    import jax
    from flax import traverse_util
    from skrl.utils.model_instantiators.torch import gaussian_model

    cfg = copy.deepcopy(dict(policy_cfg))
    kind = str(cfg.pop("class", ""))
    if kind.lower() != "gaussianmixin":
        raise NotImplementedError(f"islab: export supports skrl GaussianMixin policies, not {kind!r}")
    model = gaussian_model(observation_space=observation_space, action_space=action_space, device="cpu", **cfg)
    with torch.no_grad():  # skrl's torch layers are lazy (LazyLinear): one call gives them their shapes
        model.compute({"observations": torch.zeros(1, *observation_space.shape)}, role="policy")
    flat = {key: np.array(value) for key, value in traverse_util.flatten_dict(jax.device_get(params), sep=".").items()}
    # skrl keeps a model's variables under flax's "params" collection
    flat = {key.removeprefix("params."): value for key, value in flat.items()}
    state = {}
    for name, target in model.state_dict().items():
        key = flax_name(name)
        if key not in flat:
            raise ValueError(f"islab: the torch twin has {name} but the flax policy has no {key} ({sorted(flat)})")
        value = torch.from_numpy(flat.pop(key)).to(torch.float32)
        state[name] = value.T.contiguous() if name.endswith("weight") else value
        if state[name].shape != target.shape:
            shapes = f"{tuple(value.shape)}, the torch twin's {name} {tuple(target.shape)}"
            raise ValueError(f"islab: {key} has shape {shapes}")
    if flat:
        raise ValueError(f"islab: flax params without a torch twin: {sorted(flat)}")
    model.load_state_dict(state)
    return model.eval()
