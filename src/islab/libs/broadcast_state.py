"""Start every rank from rank 0's weights without pickling device tensors.

rl_games (``A2CBase.train``) and skrl-torch (``Model.broadcast_parameters``) copy rank 0's model to
the other ranks with ``torch.distributed.broadcast_object_list([state_dict])``: rank 0 pickles its
state dict, every other rank unpickles it. A pickled CUDA tensor remembers its device, so on every
rank the unpickled state lands on ``cuda:0``, rank 0's GPU: each rank creates a CUDA context and a
model copy on GPU 0 (at 8 GPUs per node, seven extra contexts on one GPU, an out-of-memory risk)
before ``load_state_dict`` copies it to the rank's own device.

``broadcast_state_dicts`` stands in for ``broadcast_object_list`` when the objects are state dicts
of the rank's own modules (what both libraries pass): it broadcasts the tensors themselves, which
a module's ``state_dict()`` shares with its parameters and buffers, so every rank receives into
its own tensors on its own device, nothing is pickled, and the module already holds rank 0's
values (the libraries' ``load_state_dict`` afterwards copies each tensor onto itself). Tensors are
flattened into one buffer per (device, dtype): a few broadcasts instead of one per tensor. Objects
that are not state dicts go through ``broadcast_object_list`` as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

_broadcast_object_list = dist.broadcast_object_list  # the stock one, for anything not a state dict


def broadcast_tensors(tensors: list[torch.Tensor], src: int = 0, group: Any = None) -> None:
    """Overwrite ``tensors`` on every rank with rank ``src``'s values, in place, on their own devices."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    for members in groups.values():
        flat = torch.cat([tensor.detach().reshape(-1) for tensor in members])
        dist.broadcast(flat, src=src, group=group)
        offset = 0
        with torch.no_grad():
            for tensor in members:
                tensor.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
                offset += tensor.numel()


def is_state_dict(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(item, torch.Tensor) for item in value.values())


def broadcast_state_dicts(object_list: list[Any], src: int = 0, group: Any = None, device: Any = None) -> None:
    """``dist.broadcast_object_list`` for lists of state dicts: their tensors are broadcast in place
    (module docstring), so ``object_list`` afterwards holds rank ``src``'s values in this rank's own
    tensors. Any other list goes to ``broadcast_object_list``."""
    if not object_list or not all(is_state_dict(value) for value in object_list):
        _broadcast_object_list(object_list, src, group=group, device=device)
        return
    broadcast_tensors([tensor for state in object_list for tensor in state.values()], src=src, group=group)
