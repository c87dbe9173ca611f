"""Rank 0's weights reach the other ranks as tensors on their own devices (issue 23, item 4).

rl_games and skrl-torch broadcast rank 0's state dict with ``broadcast_object_list``: the other
ranks unpickle it, and a pickled CUDA tensor lands on the device it left, rank 0's GPU. On CPU
every device is the same, so the checks are: no tensor is unpickled at all on the receiving rank
(every call of torch's unpickling step is recorded, with the device of each tensor it returns),
and the module's own tensors (same storage, same device) hold rank 0's values afterwards. Two
real gloo ranks, forked (nothing re-imported).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing as mp

from islab.libs.broadcast_state import broadcast_state_dicts

TASK = "Islab-Cartpole-v0"


def tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []


def record_unpickled_devices(devices: list[str]) -> None:
    """Every object ``broadcast_object_list`` unpickles on this rank: the devices of its tensors."""
    unpickle = c10d._tensor_to_object

    def recorded(*args: Any, **kwargs: Any) -> Any:
        value = unpickle(*args, **kwargs)
        devices.extend(str(tensor.device) for tensor in tensors_in(value))
        return value

    c10d._tensor_to_object = recorded


def _module_rank(rank: int, store: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        torch.manual_seed(rank)
        module = torch.nn.Linear(3, 2)
        module.register_buffer("count", torch.tensor([rank + 5], dtype=torch.long))  # another dtype
        state = module.state_dict()
        storage = {name: tensor.data_ptr() for name, tensor in state.items()}
        devices: list[str] = []
        record_unpickled_devices(devices)
        object_list = [state]
        broadcast_state_dicts(object_list, 0)
        received = object_list[0]
        results[rank] = {
            "values": {name: tensor.clone() for name, tensor in module.state_dict().items()},
            "own_storage": all(received[name].data_ptr() == storage[name] for name in storage),
            "devices": sorted({str(tensor.device) for tensor in received.values()}),
            "unpickled": devices,
        }
    finally:
        dist.destroy_process_group()


def test_state_dict_broadcast_fills_each_ranks_own_tensors(tmp_path: Path) -> None:
    results = mp.Manager().dict()
    mp.start_processes(_module_rank, args=(str(tmp_path / "store"), results), nprocs=2, join=True, start_method="fork")
    rank0, rank1 = results[0], results[1]
    for name, value in rank0["values"].items():
        assert torch.equal(rank1["values"][name], value), name
    assert int(rank1["values"]["count"]) == 5  # rank 0's
    for result in (rank0, rank1):
        assert result["own_storage"] and result["devices"] == ["cpu"]  # the rank's own tensors, own device
        assert result["unpickled"] == []  # nothing pickled: no tensor can land on another rank's device


def _library_rank(rank: int, store: str, lib: str, run_dir: str, results: dict) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="1", GIT_PYTHON_REFRESH="quiet")
    from islab.envs import make_env
    from islab.libs import load_adapter
    from islab.spec.agent_config import load_agent_config
    from islab.worker.context import RankContext, configure_process

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        ctx = RankContext.from_environ("cpu", 0)
        configure_process(ctx)
        torch.set_num_threads(1)
        devices: list[str] = []
        record_unpickled_devices(devices)
        env = make_env(TASK, 16, ctx.device, seed=ctx.seed)
        adapter = load_adapter(lib, "torch")(ctx, env, load_agent_config(lib, TASK), Path(run_dir) / lib)
        adapter.train(1)
        results[rank] = {"unpickled": devices, "state": {k: v.clone() for k, v in adapter.policy_state().items()}}
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("lib", ["rl_games", "skrl"])
def test_library_start_broadcast_unpickles_no_tensor(lib: str, tmp_path: Path) -> None:
    """The libraries' own start-of-training broadcast (rl_games' ``A2CBase.train``, skrl's
    ``Model.broadcast_parameters``) runs and rank 1 unpickles no tensor; the ranks end equal."""
    results = mp.Manager().dict()
    args = (str(tmp_path / "store"), lib, str(tmp_path), results)
    mp.start_processes(_library_rank, args=args, nprocs=2, join=True, start_method="fork")
    assert results[1]["unpickled"] == [], f"rank 1 unpickled tensors onto {results[1]['unpickled']}"
    for name, value in results[0]["state"].items():
        assert torch.equal(results[1]["state"][name], value), name
