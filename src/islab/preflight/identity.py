"""What one rank of the pre-flight probe tells the others about itself (torch and JAX probes alike)."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from islab.preflight.report import FIELDS_VARIABLE


def identity(ctx: Any) -> dict[str, Any]:
    import torch

    gpu_uuid = nccl = None
    if ctx.device.startswith("cuda"):
        gpu_uuid = str(torch.cuda.get_device_properties(torch.device(ctx.device)).uuid)
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "rank": ctx.rank,
        "host": socket.gethostname(),
        "local_rank": ctx.local_rank,
        "device": ctx.device,
        "gpu_uuid": gpu_uuid,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nccl": nccl,
        "fields": json.loads(os.environ.get(FIELDS_VARIABLE) or "{}"),
    }
