"""Scaling model (issue 13): predicted iteration time and parallel efficiency for 1-64 GPUs.

    python scripts/scaling_model.py                                   # markdown, every library
    python scripts/scaling_model.py --gpus 1,2,4,8,16,32,64 --lib all --sync stock,fused --format json
    python scripts/scaling_model.py --inter ethernet --steps-per-s 510000   # other fabric / GPU

Why the number of messages, not their size, sets the cost
---------------------------------------------------------
Data-parallel PPO runs the same update on every GPU and averages the gradients with an
all-reduce. A ring all-reduce of ``S`` bytes over ``n`` GPUs costs (Patarasuk & Yuan; the
``busbw`` convention of nccl-tests' doc/PERFORMANCE.md)::

    t(S, n) = alpha(n) + 2 (n - 1) / n * S / busbw

``alpha`` is the fixed price of one collective: a kernel launch, a handshake between the GPUs,
a round trip over the link. ``busbw`` is the link's usable bandwidth. A robot-RL policy is
small: the Cartpole actor-critic here has 1,283-2,499 parameters, 5-10 KB of gradients. Over
NVLink (370 GB/s) those bytes take 0.05 us; over a 400 Gb/s InfiniBand NIC (46 GB/s) 0.4 us. One
collective's fixed price is 12-120 us. So for a small policy the size term is a rounding error
and ``t`` is ``alpha``: the cost of synchronisation is (number of collectives) x alpha, whatever
they carry. The same holds for gloo on a CPU (188 us for 1 float, 541 us for 40,000 floats, here).

The libraries issue several collectives per optimizer update (the gradients, the KL of the
adaptive learning-rate schedule, rank 0's learning rate, normalizer moments...), so an
iteration pays ``collectives x alpha``. Packing everything one update needs into one buffer (the
"fused" sync of issue 13: one collective per update + at most 2 per iteration) divides the
count by 3-4 and leaves the bytes unchanged. Efficiency is::

    efficiency(n) = T_compute / (T_compute + sum_k count_k * t(S_k, n))

with ``T_compute`` the time of one iteration on one GPU (weak scaling: every GPU keeps its
4096 envs, so compute per GPU does not change with ``n``). For ``efficiency >= 0.95`` the sync
may take at most 5.3% of ``T_compute``: with U updates per iteration and one collective each,
``alpha_eff <= 0.0526 * T_compute / U``. The quantity that decides is updates per second of
compute, not policy size.

Three models, because the pure one does not explain the measurements
---------------------------------------------------------------------
* ``nccl``: the formula above with alpha and busbw taken from published nccl-tests runs
  (PARAMETERS below, each with its source). It is a lower bound: it assumes every rank arrives
  at every collective at the same moment, as nccl-tests' back-to-back loop does.
* ``per-collective`` and ``per-update``: add an overhead seen inside real training and absent from
  nccl-tests (waiting for the slowest rank, the host synchronisation of ``.item()`` on the KL and
  learning rate, eager PyTorch's per-call work). Its size is fitted on ONE published point (Isaac
  Lab, Cartpole-Direct, 4 x L40 in one node: how much longer the update phase got than on one
  GPU) and checked on another (16 x L40 in 4 nodes). ``per-collective`` charges it once per
  collective (a host-side cost: fusing removes it); ``per-update`` once per update (a wait for the
  slowest rank at each update's first collective: fusing cannot remove it). Isaac Lab's stock
  rl_games has the same ratio of collectives to updates at both points, so the two fit and
  validate identically; they disagree only about fused sync, and bracket its benefit.

Inputs, each read from its one home: the agent configs (updates per iteration = epochs x
minibatches; policy sizes -> gradient bytes), the task's observation/action sizes, and
``docs/benchmarks.json`` (CPU compute per iteration, stock collectives per iteration, gloo
latencies). GPU compute per iteration is DERIVED, not measured here: Isaac Lab's published
single-L40 Cartpole-Direct training rate (260k env steps/s, rl_games, 4096 envs) applied to each
library's rollout length. The script is pure: no clock, no randomness, no network.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from islab.spec.agent_config import load_agent_config
from islab.spec.sync_cost import FLOAT_BYTES, SyncWork, mlp_params, ring_bytes, sync_work
from islab.spec.sync_cost import allreduce_s as ring_allreduce_s
from islab.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
BENCH_JSON = ROOT / "docs" / "benchmarks.json"
LIBS = ("rsl_rl", "rl_games", "skrl-torch", "skrl-jax")
SYNCS = ("stock", "fused")
MODELS = ("nccl", "per-collective", "per-update")
GPUS_PER_NODE = 8
NUM_ENVS = 4096  # per GPU, Isaac Lab's default and docs/benchmarks.json's


@dataclass(frozen=True)
class Fabric:
    """One link kind: fixed cost of one small all-reduce and usable (bus) bandwidth."""

    name: str
    alpha_s: float
    busbw_bytes_per_s: float
    source: str


# Every constant below is a published measurement; the source says where and which figure.
INTRA: dict[str, Fabric] = {
    "nvlink": Fabric(
        "NVLink 4 + NVSwitch (Hopper, 8 GPUs)",
        12.5e-6,
        370e9,
        "alpha: nccl-tests all_reduce_perf on 8 x H20 (Hopper NVSwitch), 4-16 B: 12.49 us "
        "(https://github.com/deepseek-ai/DeepEP/issues/303); with CUDA graphs 2 x H100 reach ~6 us "
        "(https://github.com/NVIDIA/nccl/issues/1259). busbw: 'app-level bandwidth is 370GB/s in each "
        "direction ... the real target for NCCL BusBW intra-node' (NCCL maintainer, "
        "https://github.com/NVIDIA/nccl/issues/1442)",
    ),
    "pcie": Fabric(
        "PCIe (no NVLink, e.g. L40)",
        25e-6,
        31.5e9,
        "alpha: nccl-tests all_reduce_perf, 4 GPUs of one node, 128 B-1 KB: 24.7-25.0 us "
        "(https://github.com/NVIDIA/nccl-tests/issues/128). busbw: PCIe 4.0 x16 line rate, 16 GT/s x 16 "
        "lanes = 31.5 GB/s per direction (an upper bound; irrelevant at 5-10 KB)",
    ),
}
INTER: dict[str, Fabric] = {
    "ib": Fabric(
        "InfiniBand (GPUDirect RDMA)",
        40.6e-6,
        46e9,
        "alpha: nccl-tests all_reduce_perf over InfiniBand, 2 nodes x 2 GPUs, 8 B: 40.64 us "
        "(https://github.com/NVIDIA/nccl-tests/issues/182). busbw: 'For NDR @ 400Gbps you should see "
        "46-48GB/s per NIC' (NVIDIA, https://github.com/NVIDIA/nccl-tests/issues/290)",
    ),
    "ethernet": Fabric(
        "Ethernet (GPUDirect-TCPXO, GCP A3 Mega)",
        123e-6,
        339e9,
        "alpha: nccl-tests all_reduce_perf, 2 nodes x 8 H100, 16-256 B: 122-124 us; busbw 338.8 GB/s at "
        "8 GB (https://github.com/lessizzmore/create-a3mega-ztan-fork/blob/main/ztan-NCCL-test-result)",
    ),
}
GLOO_SOURCE = "this machine: scripts/bench_allreduce.py, 2 CPU ranks, medians in docs/benchmarks.json"

# Isaac Lab's published Cartpole-Direct figures (rl_games, 4096 envs per GPU), env steps/s:
# docs/source/overview/reinforcement-learning/performance_benchmarks.rst of isaac-sim/IsaacLab,
# columns "Environment Step and Inference FPS" and "Environment Step, Inference, and Train FPS".
ISAAC_LAB_URL = (
    "https://isaac-sim.github.io/IsaacLab/main/source/overview/reinforcement-learning/performance_benchmarks.html"
)
ISAAC_LAB_ROLLOUT_FPS = {1: 490e3, 4: 2.1e6, 16: 8.2e6}
ISAAC_LAB_TRAIN_FPS = {1: 260e3, 4: 950e3, 16: 3.5e6}
ISAAC_LAB_GPUS_PER_NODE = 4  # "4 Nodes, 4 x L40 GPUs per node"; L40 has no NVLink
# Isaac Lab's isaaclab_tasks/direct/cartpole/agents/rl_games_ppo_cfg.yaml (ours differs only in
# these two, see the header of islab/tasks/cartpole/agents/rl_games_ppo_cfg.yaml)
ISAAC_LAB_HORIZON, ISAAC_LAB_MINIBATCH = 32, 16384
# Same page, Isaac-Velocity-Rough-G1-v0 (rsl_rl); its agent config (G1RoughPPORunnerCfg in
# isaaclab_tasks/.../velocity/config/g1/agents/rsl_rl_ppo_cfg.py): 24 steps per env, 5 epochs x 4
# minibatches, actor and critic [512, 256, 128]. An out-of-sample check of the calibration.
G1_ROLLOUT_FPS = {1: 64e3, 4: 270e3, 16: 1.1e6}
G1_TRAIN_FPS = {1: 62e3, 4: 250e3, 16: 960e3}
G1_HORIZON, G1_UPDATES, G1_HIDDEN = 24, 5 * 4, (512, 256, 128)


# --------------------------------------------------------------------------------------------
# inputs: configs, task sizes, measurements


CARTPOLE = "Islab-Cartpole-v0"


def agent_config(lib: str) -> dict[str, Any]:
    """The Cartpole agent config of ``lib`` (``rl_games``, ``rsl_rl``, ``skrl``), from the task's
    own registration (no torch: :mod:`islab.spec.agent_config` only reads YAML)."""
    return load_agent_config(lib, CARTPOLE)


def task_sizes() -> tuple[int, int]:
    """(observation size, action size) of Cartpole, as its registration gives them (the task registry)."""
    info = TASKS[CARTPOLE]
    return info.observation_size, info.action_size


def bench() -> dict[str, Any]:
    return json.loads(BENCH_JSON.read_text(encoding="utf-8"))


def stock_collectives(measured: dict[str, Any], lib: str) -> int:
    """Collectives per iteration with each library's own sync: section 8 of the bench report (runs
    with ``ISLAB_SYNC=stock``) where it has one; reports written before fused sync became the
    default counted stock sync in the training section."""
    sync = (measured.get("sync") or {}).get("libs") or {}
    if lib in sync:
        return round(sync[lib]["stock"]["collectives_per_iteration"])
    return round(cartpole_training(measured)[lib]["median"]["collective_calls_per_iteration"])


def cartpole_training(measured: dict[str, Any]) -> dict[str, Any]:
    """Cartpole's per-library training numbers of a bench report: ``train.tasks[CARTPOLE].libs``
    (bench.py with the task dimension), or ``train.libs`` in reports written before it."""
    train = measured["train"]
    return train["tasks"][CARTPOLE]["libs"] if "tasks" in train else train["libs"]


@dataclass(frozen=True)
class Workload(SyncWork):
    """What one library does per iteration on one GPU: its config's :class:`SyncWork` (updates,
    gradient sizes, the fused collectives) plus the stock collectives measured in docs/benchmarks.json."""

    stock_collectives: int = 0  # per iteration, measured (docs/benchmarks.json)

    def collectives(self, sync: str) -> list[tuple[int, int]]:
        """[(count per iteration, floats each)] for ``stock`` or ``fused`` sync."""
        if sync == "fused":
            return self.fused()
        grads = self.updates * len(self.grad_floats)
        small = self.stock_collectives - grads
        return [(self.updates, f) for f in self.grad_floats] + ([(small, self.small_floats)] if small else [])

    def count(self, sync: str) -> int:
        return sum(c for c, _ in self.collectives(sync))


def workloads(measured: dict[str, Any] | None = None) -> dict[str, Workload]:
    measured = measured or bench()
    obs, act = task_sizes()
    result = {}
    for lib in LIBS:
        name, framework = ("skrl", lib.split("-")[1]) if lib.startswith("skrl") else (lib, "torch")
        work = sync_work(name, framework, agent_config(name), observation_size=obs, action_size=act,
                         num_envs=NUM_ENVS)  # fmt: skip
        result[lib] = Workload(**asdict(work), stock_collectives=stock_collectives(measured, lib))
    for w in result.values():  # a stock count must hold every update's gradient reduction
        if w.stock_collectives < w.updates * len(w.grad_floats):
            raise ValueError(
                f"{BENCH_JSON}: {w.lib} makes {w.stock_collectives} collectives per iteration, fewer than "
                f"its {w.updates * len(w.grad_floats)} gradient reductions: not a stock-sync count"
            )
    return result


# --------------------------------------------------------------------------------------------
# the cost model


@dataclass(frozen=True)
class Topology:
    intra: Fabric
    inter: Fabric
    gpus_per_node: int = GPUS_PER_NODE


def allreduce_s(n: int, nbytes: float, topo: Topology) -> tuple[float, float]:
    """(intra-node part, inter-node part) of one all-reduce of ``nbytes`` over ``n`` GPUs.

    Inside a node: ring formula with the intra fabric. Across nodes NCCL reduces inside each node,
    crosses the network with a tree for small messages (depth log2(nodes)), and broadcasts back:
    the network adds ``(alpha_2nodes - alpha_intra) * log2(nodes)``, the published 2-node figure
    minus the part of it spent inside the node, once per tree level; bandwidth is the slower
    link's. This log2 growth is the one modelling assumption not measured at 4 and 8 nodes."""
    if n <= topo.gpus_per_node:
        return ring_allreduce_s(nbytes, n, topo.intra.alpha_s, topo.intra.busbw_bytes_per_s), 0.0
    nodes = math.ceil(n / topo.gpus_per_node)
    hop = max(topo.inter.alpha_s - topo.intra.alpha_s, 0.0)
    slow = min(topo.intra.busbw_bytes_per_s, topo.inter.busbw_bytes_per_s)
    return topo.intra.alpha_s, hop * math.log2(nodes) + ring_bytes(nbytes, n) / slow


def gloo_allreduce_s(nbytes: float, latencies: dict[str, Any]) -> float:
    """One gloo all-reduce between 2 CPU ranks: alpha = the 1-float median, bandwidth from the
    40,000-float median (``docs/benchmarks.json``, this machine)."""
    alpha = latencies["1"]["median_s"]
    bandwidth = 40_000 * FLOAT_BYTES / (latencies["40000"]["median_s"] - alpha)
    return alpha + nbytes / bandwidth


@dataclass(frozen=True)
class Prediction:
    lib: str
    sync: str
    model: str
    gpus: int
    nodes: int
    collectives: int
    compute_s: float
    intra_s: float
    inter_s: float
    overhead_s: float
    iteration_s: float
    efficiency: float


def sync_points(work: Workload, sync: str, model: str) -> int:
    """How many times per iteration the calibrated overhead is paid: once per collective
    (``per-collective``), or once per update plus once per iteration (``per-update``: the ranks
    wait for each other at an update's first collective; later ones in the same update find them
    aligned). ``nccl`` pays none."""
    if model == "per-collective":
        return work.count(sync)
    if model == "per-update":
        return work.updates + 1
    return 0


def predict(
    work: Workload, sync: str, gpus: int, compute_s: float, topo: Topology, overhead_s: float = 0.0, model: str = "nccl"
) -> Prediction:
    """Iteration time and efficiency of ``work`` on ``gpus`` GPUs; ``overhead_s`` is the calibrated
    cost of one sync point inside training (see ``sync_points``; 0 for the pure NCCL model)."""
    intra = inter = 0.0
    for count, floats in work.collectives(sync):
        a, b = allreduce_s(gpus, floats * FLOAT_BYTES, topo)
        intra, inter = intra + count * a, inter + count * b
    extra = sync_points(work, sync, model) * overhead_s if gpus > 1 else 0.0
    iteration = compute_s + intra + inter + extra
    return Prediction(
        work.lib,
        sync,
        model,
        gpus,
        math.ceil(gpus / topo.gpus_per_node),
        work.count(sync),
        compute_s,
        intra,
        inter,
        extra,
        iteration,
        compute_s / iteration,
    )


def gpu_compute_s(work: Workload, steps_per_s: float) -> float:
    """DERIVED GPU compute per iteration: Isaac Lab's single-GPU training rate applied to this
    library's rollout length (assumes every library trains as fast per env step as rl_games)."""
    return NUM_ENVS * work.rollout / steps_per_s


# --------------------------------------------------------------------------------------------
# validation against published and measured numbers


def isaac_lab_workload(stock_template: Workload) -> Workload:
    """rl_games 1.6 with Isaac Lab's Cartpole config: 8 mini-epochs x 8 minibatches. Stock
    collectives per update: gradients, KL, rank 0's learning rate (3, rl_games' a2c_common.py
    ``trancate_gradients_and_step``, legacy KL schedule, ``update_lr``); per mini-epoch the
    averaged KL (8), per iteration ``should_exit`` (1); no normalizer sync in that version."""
    updates = 8 * (NUM_ENVS * ISAAC_LAB_HORIZON // ISAAC_LAB_MINIBATCH)
    return Workload("rl_games", ISAAC_LAB_HORIZON, updates, stock_template.grad_floats, small_floats=1,
                    stock_collectives=3 * updates + 8 + 1)  # fmt: skip


def update_growth(gpus: int, horizon: int, rollout_fps: dict[int, float], train_fps: dict[int, float]) -> float:
    """Published: how much longer the update phase (train FPS minus rollout FPS) is on ``gpus``
    than on one, per iteration, in seconds."""

    def update_s(n: int) -> float:
        steps = NUM_ENVS * horizon * n
        return steps / train_fps[n] - steps / rollout_fps[n]

    return update_s(gpus) - update_s(1)


def isaac_lab_update_growth(gpus: int) -> float:
    return update_growth(gpus, ISAAC_LAB_HORIZON, ISAAC_LAB_ROLLOUT_FPS, ISAAC_LAB_TRAIN_FPS)


def g1_workload() -> Workload:
    """rsl_rl on G1 rough: 3 collectives per update (gradients, KL, learning rate), no normalizer.
    Gradient size: the hidden-to-hidden layers of both networks only, a lower bound (the input
    layer depends on the observation size, which the benchmark page does not state)."""
    grads = 2 * mlp_params(G1_HIDDEN)
    return Workload("rsl_rl", G1_HORIZON, G1_UPDATES, (grads,), small_floats=1, stock_collectives=3 * G1_UPDATES)


def calibrate(work: dict[str, Workload], inter: str = "ib") -> dict[str, Any]:
    """Fit the overhead of one sync point on Isaac Lab's 4 x L40 point (per collective and per
    update), check it on 16 x L40."""
    lab = isaac_lab_workload(work["rl_games"])
    topo = Topology(INTRA["pcie"], INTER[inter], ISAAC_LAB_GPUS_PER_NODE)
    t1 = NUM_ENVS * ISAAC_LAB_HORIZON / ISAAC_LAB_TRAIN_FPS[1]
    nccl4 = predict(lab, "stock", 4, t1, topo)
    residual = isaac_lab_update_growth(4) - (nccl4.intra_s + nccl4.inter_s)
    overhead = {"nccl": 0.0, **{m: residual / sync_points(lab, "stock", m) for m in MODELS[1:]}}
    checks = [
        ("Cartpole-Direct, rl_games", lab, ISAAC_LAB_HORIZON, ISAAC_LAB_ROLLOUT_FPS, ISAAC_LAB_TRAIN_FPS),
        ("G1 rough, rsl_rl", g1_workload(), G1_HORIZON, G1_ROLLOUT_FPS, G1_TRAIN_FPS),
    ]
    rows = []
    for task, work_, horizon, rollout_fps, train_fps in checks:
        compute = NUM_ENVS * horizon / train_fps[1]
        for n in (4, 16):
            measured_eff = train_fps[n] / (n * train_fps[1])
            growth = update_growth(n, horizon, rollout_fps, train_fps)
            for model in MODELS:
                sync = predict(work_, "stock", n, compute, topo, overhead[model], model).iteration_s - compute
                rows.append(
                    {
                        "check": task,
                        "model": model,
                        "gpus": n,
                        "predicted_efficiency": compute / (compute + sync),
                        "measured_efficiency": measured_eff,
                        "efficiency_error": compute / (compute + sync) / measured_eff - 1,
                        "predicted_sync_s": sync,
                        "measured_update_growth_s": growth,
                        "sync_error": sync / growth - 1,
                        "fitted_here": model != "nccl" and n == 4 and work_ is lab,
                    }
                )
    return {
        "overhead_s": overhead,
        "collectives_per_iteration": lab.count("stock"),
        "updates": lab.updates,
        "compute_s": t1,
        "rows": rows,
        "inter": inter,
    }


def validate_cpu(work: dict[str, Workload], measured: dict[str, Any]) -> list[dict[str, Any]]:
    """The gloo model at 1 and 2 CPU ranks against docs/benchmarks.json (this machine)."""
    latencies = measured["train"]["gloo_latency"]["floats"]
    rows = []
    for lib in LIBS:
        med = cartpole_training(measured)[lib]["median"]
        w = work[lib]
        compute = NUM_ENVS * w.rollout / med["steps_per_s_1rank"]
        sync = sum(c * gloo_allreduce_s(floats * FLOAT_BYTES, latencies) for c, floats in w.collectives("stock"))
        predicted = compute / (compute + sync)
        measured_eff = med["scaling_of_ceiling"]
        implied = (compute / measured_eff - compute) / w.count("stock")
        rows.append(
            {
                "lib": lib,
                "compute_s": compute,
                "collectives": w.count("stock"),
                "predicted_sync_s": sync,
                "predicted_efficiency_1rank": 1.0,
                "predicted_efficiency_2ranks": predicted,
                "measured_scaling_of_ceiling": measured_eff,
                "efficiency_error": predicted / measured_eff - 1,
                "predicted_sync_share": sync / (compute + sync),
                "measured_sync_share": med["sync_share"],
                "measured_transfer_floor": med["sync_floor_share"],
                "implied_cost_per_collective_s": implied,
                "measured_median_collective_s": med["collective_call_s"],
            }
        )
    return rows


def gloo_fit_residual(measured: dict[str, Any]) -> float:
    """The alpha-beta gloo fit at the point it was not fitted on (2,500 floats): relative error."""
    latencies = measured["train"]["gloo_latency"]["floats"]
    return gloo_allreduce_s(2_500 * FLOAT_BYTES, latencies) / latencies["2500"]["median_s"] - 1


# --------------------------------------------------------------------------------------------
# report


def build(gpus: Sequence[int], libs: Sequence[str], syncs: Sequence[str], inter: str, steps_per_s: float) -> dict:
    measured = bench()
    work = workloads(measured)
    cal = calibrate(work, inter)
    topo = Topology(INTRA["nvlink"], INTER[inter])
    predictions = [
        predict(work[lib], sync, n, gpu_compute_s(work[lib], steps_per_s), topo, cal["overhead_s"][model], model)
        for model in MODELS
        for lib in libs
        for sync in syncs
        for n in gpus
    ]
    return {
        "assumptions": {
            "gpus_per_node": GPUS_PER_NODE,
            "envs_per_gpu": NUM_ENVS,
            "intra": INTRA["nvlink"].name,
            "inter": INTER[inter].name,
            "single_gpu_steps_per_s": steps_per_s,
            "compute_source": f"DERIVED: Isaac Lab 1 x L40 Cartpole-Direct training rate ({ISAAC_LAB_URL})"
            if steps_per_s == ISAAC_LAB_TRAIN_FPS[1]
            else "given with --steps-per-s",
        },
        "parameters": {
            "intra": {k: asdict(v) for k, v in INTRA.items()},
            "inter": {k: asdict(v) for k, v in INTER.items()},
            "gloo": {
                "latencies": measured["train"]["gloo_latency"]["floats"],
                "source": GLOO_SOURCE,
                "fit_residual_2500_floats": gloo_fit_residual(measured),
            },
            "calibrated_overhead_s": cal["overhead_s"],
        },
        "workloads": {
            lib: {**asdict(work[lib]), "stock": work[lib].count("stock"), "fused": work[lib].count("fused")}
            for lib in libs
        },
        "predictions": [asdict(p) for p in predictions],
        "validation": {"cpu_gloo": validate_cpu(work, measured), "isaac_lab": cal},
    }


def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%"


def markdown(report: dict[str, Any]) -> str:
    a = report["assumptions"]
    gpus = sorted({p["gpus"] for p in report["predictions"]})
    lines = [
        f"Weak scaling, {a['envs_per_gpu']} envs per GPU, {a['gpus_per_node']} GPUs per node ({a['intra']}), "
        f"nodes joined by {a['inter']}; one-GPU compute: {a['single_gpu_steps_per_s']:,.0f} env steps/s "
        f"({a['compute_source']}).",
        "",
        "| library | sync | collectives / iteration | model | " + " | ".join(f"{n} GPU" for n in gpus) + " |",
        "|---|---|---|---|" + "---|" * len(gpus),
    ]
    rows: dict[tuple[str, str, str], dict[int, dict]] = {}
    for p in report["predictions"]:
        rows.setdefault((p["lib"], p["sync"], p["model"]), {})[p["gpus"]] = p
    for (lib, sync, model), by_n in sorted(rows.items(), key=lambda kv: (LIBS.index(kv[0][0]), kv[0][2], kv[0][1])):
        first = by_n[gpus[0]]
        cells = [
            f"{by_n[n]['efficiency']:.3f} ({(by_n[n]['iteration_s'] - by_n[n]['compute_s']) * 1e3:.1f} ms)"
            for n in gpus
        ]
        lines.append(f"| {lib} | {sync} | {first['collectives']} | {model} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Cells: efficiency (sync time per iteration). Compute per iteration: "
        + ", ".join(
            f"{lib} {next(p['compute_s'] for p in report['predictions'] if p['lib'] == lib) * 1e3:.0f} ms"
            for lib in report["workloads"]
        )
        + ".",
    ]
    cal = report["validation"]["isaac_lab"]
    lines += [
        "",
        "Calibrated overhead of one sync point, fitted on Isaac Lab 4 x L40: "
        f"{cal['overhead_s']['per-collective'] * 1e6:.0f} us per collective, or "
        f"{cal['overhead_s']['per-update'] * 1e6:.0f} us per update.",
        "",
        "Validation against Isaac Lab's published table (4096 envs per GPU; Cartpole: rl_games, "
        f"{cal['updates']} updates and {cal['collectives_per_iteration']} collectives per iteration; G1: rsl_rl, "
        f"{G1_UPDATES} updates and {3 * G1_UPDATES} collectives):",
        "",
        "| point | model | predicted efficiency | published | error | predicted sync | published update growth "
        "| error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in cal["rows"]:
        fitted = " (fitted here)" if r["fitted_here"] else ""
        lines.append(
            f"| {r['check']}, {r['gpus']} x L40 | {r['model']}{fitted} | {r['predicted_efficiency']:.3f} | "
            f"{r['measured_efficiency']:.3f} | {_pct(r['efficiency_error'])} | {r['predicted_sync_s'] * 1e3:.1f} ms | "
            f"{r['measured_update_growth_s'] * 1e3:.1f} ms | {_pct(r['sync_error'])} |"
        )
    lines += [
        "",
        "Validation, this machine (gloo, 2 CPU ranks, stock sync, docs/benchmarks.json):",
        "",
        "| library | collectives | predicted efficiency 1 / 2 ranks | measured scaling / ceiling | error | "
        "predicted sync share | measured sync share (transfer floor) | implied cost per collective | "
        "measured median collective |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["validation"]["cpu_gloo"]:
        lines.append(
            f"| {r['lib']} | {r['collectives']} | 1.000 / {r['predicted_efficiency_2ranks']:.3f} | "
            f"{r['measured_scaling_of_ceiling']:.3f} | {_pct(r['efficiency_error'])} | "
            f"{r['predicted_sync_share'] * 100:.1f}% | {r['measured_sync_share'] * 100:.1f}% "
            f"({r['measured_transfer_floor'] * 100:.1f}%) | {r['implied_cost_per_collective_s'] * 1e6:.0f} us | "
            f"{r['measured_median_collective_s'] * 1e6:.0f} us |"
        )
    resid = report["parameters"]["gloo"]["fit_residual_2500_floats"]
    lines += ["", f"gloo alpha-beta fit at 2,500 floats (not fitted there): {_pct(resid)} vs the measured median."]
    return "\n".join(lines) + "\n"


def _fail(field: str, problem: str, fix: str) -> None:
    print(f"error: {field}: {problem}. {fix}.", file=sys.stderr)
    raise SystemExit(2)


def _choices(value: str, allowed: Sequence[str], field: str) -> list[str]:
    chosen = list(allowed) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in chosen if v not in allowed]
    if bad or not chosen:
        _fail(field, f"unknown value {','.join(bad) or repr(value)}", f"Use all or a comma list of {','.join(allowed)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1,2,4,8,16,32,64", help="comma list of GPU counts (1-64)")
    parser.add_argument("--lib", default="all", help=f"all or a comma list of {','.join(LIBS)}")
    parser.add_argument("--sync", default="stock,fused", help="stock, fused or both")
    parser.add_argument("--inter", default="ib", help=f"inter-node fabric: {', '.join(INTER)}")
    parser.add_argument(
        "--steps-per-s",
        type=float,
        default=ISAAC_LAB_TRAIN_FPS[1],
        help="one GPU's training rate in env steps/s (default: Isaac Lab 1 x L40)",
    )
    parser.add_argument("--format", default="md", help="md or json")
    parser.add_argument("--out", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    try:
        gpus = sorted({int(g) for g in args.gpus.split(",") if g.strip()})
    except ValueError:
        _fail("gpus", f"{args.gpus!r} is not a comma list of integers", "Use e.g. --gpus 1,2,4,8,16,32,64")
    if not gpus or gpus[0] < 1 or gpus[-1] > 64:
        _fail("gpus", f"{args.gpus!r} is outside 1-64", "Use GPU counts from 1 to 64 (8 nodes of 8)")
    libs = _choices(args.lib, LIBS, "lib")
    syncs = _choices(args.sync, SYNCS, "sync")
    if args.inter not in INTER:
        _fail("inter", f"unknown fabric {args.inter!r}", f"Use one of {', '.join(INTER)}")
    if args.format not in ("md", "json"):
        _fail("format", f"unknown format {args.format!r}", "Use md or json")
    if not args.steps_per_s > 0:
        _fail("steps-per-s", f"{args.steps_per_s} is not positive", "Give one GPU's env steps/s, e.g. 260000")
    report = build(gpus, libs, syncs, args.inter, args.steps_per_s)
    text = json.dumps(report, indent=1, sort_keys=True) + "\n" if args.format == "json" else markdown(report)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
