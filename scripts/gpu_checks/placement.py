"""A training script's device placement, for ``scripts/gpu_acceptance.py``: every rank creates a CUDA
context and holds memory for a while, on ``cuda:LOCAL_RANK`` with ``--set-device`` (the fix), else on
the default device, GPU 0 (the mistake islab-train must name within seconds)."""

from __future__ import annotations

import os
import sys
import time

import torch

if "--set-device" in sys.argv:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
held = torch.ones(256, 1024, 1024, device="cuda")  # 1 GiB, so NVML lists the process with memory
print(f"rank {os.environ.get('RANK')} on cuda:{torch.cuda.current_device()}", flush=True)
time.sleep(20 if "--set-device" in sys.argv else 300)
