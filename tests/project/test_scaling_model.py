"""The scaling model (``scripts/scaling_model.py``) keeps the properties that make it a model:
one GPU is perfectly efficient, every extra collective costs time, fused sync never loses to
stock, the network appears only once a job leaves its node, the size of a small policy's
gradients hardly matters, and the calibration reproduces the point it was fitted on. Pure
arithmetic on the repository's configs and docs/benchmarks.json: no training, well under a second
(plus one CLI run)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from paths import REPO

ROOT = REPO
GPUS = [1, 2, 4, 8, 16, 32, 64]


def _load_model():
    spec = importlib.util.spec_from_file_location("scaling_model", ROOT / "scripts" / "scaling_model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["scaling_model"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


sm = _load_model()


@pytest.fixture(scope="module")
def report() -> dict:
    return sm.build(GPUS, sm.LIBS, sm.SYNCS, "ib", sm.ISAAC_LAB_TRAIN_FPS[1])


def test_one_gpu_is_perfect_efficiency_falls_with_gpus_and_fused_never_loses(report: dict) -> None:
    table = {(p["lib"], p["sync"], p["model"], p["gpus"]): p for p in report["predictions"]}
    assert len(table) == len(sm.LIBS) * len(sm.SYNCS) * len(sm.MODELS) * len(GPUS)
    for (lib, sync, model, n), p in table.items():
        if n == 1:
            assert p["efficiency"] == 1.0 and p["iteration_s"] == p["compute_s"]
        else:
            assert p["efficiency"] < 1.0
            assert p["efficiency"] <= table[(lib, sync, model, GPUS[GPUS.index(n) - 1])]["efficiency"]
        if sync == "fused":
            assert p["efficiency"] >= table[(lib, "stock", model, n)]["efficiency"], (lib, model, n)
    for lib, w in report["workloads"].items():  # the rule, and the stock counts of its table
        assert w["fused"] <= w["updates"] + 2 < w["stock"], lib
    assert {lib: w["updates"] for lib, w in report["workloads"].items()} == {
        "rsl_rl": 20, "rl_games": 128, "skrl-torch": 64, "skrl-jax": 64,
    }  # fmt: skip


def test_every_extra_collective_costs_time() -> None:
    work = sm.workloads()["rsl_rl"]
    topo = sm.Topology(sm.INTRA["nvlink"], sm.INTER["ib"])
    for model in sm.MODELS:
        overhead = 0.0 if model == "nccl" else 1e-4
        for n in (2, 8, 16, 64):
            times = [
                sm.predict(replace(work, stock_collectives=work.stock_collectives + extra), "stock", n, 0.25, topo,
                           overhead, model).iteration_s
                for extra in (0, 10, 100)
            ]  # fmt: skip
            assert times[0] < times[1] < times[2], (model, n)


def test_network_term_appears_only_past_one_node(report: dict) -> None:
    topo = sm.Topology(sm.INTRA["nvlink"], sm.INTER["ib"])
    nbytes = 2499 * sm.FLOAT_BYTES
    for n in GPUS:
        intra, inter = sm.allreduce_s(n, nbytes, topo)
        assert (inter > 0) == (n > sm.GPUS_PER_NODE), n
        assert (intra > 0) == (n > 1), n
    assert sm.allreduce_s(16, nbytes, topo)[1] < sm.allreduce_s(64, nbytes, topo)[1]  # deeper tree
    for p in report["predictions"]:
        assert (p["inter_s"] > 0) == (p["gpus"] > sm.GPUS_PER_NODE)
        assert p["nodes"] == -(-p["gpus"] // sm.GPUS_PER_NODE)


def test_small_policy_pays_for_messages_not_bytes() -> None:
    """The teaching claim of the model: Cartpole's gradients cost a few percent more than an empty
    message on every fabric, while a large buffer shows the ring's bandwidth term 2(n-1)/n S/busbw."""
    grad_bytes = max(max(w.grad_floats) for w in sm.workloads().values()) * sm.FLOAT_BYTES
    for intra in sm.INTRA.values():
        for inter in sm.INTER.values():
            topo = sm.Topology(intra, inter)
            for n in (2, 8, 16, 64):
                empty, grads = sum(sm.allreduce_s(n, 0, topo)), sum(sm.allreduce_s(n, grad_bytes, topo))
                assert grads / empty - 1 < 0.03, (intra.name, inter.name, n)
    topo = sm.Topology(sm.INTRA["nvlink"], sm.INTER["ib"])
    big = 1e9
    expected = sm.INTRA["nvlink"].alpha_s + 2 * 7 / 8 * big / sm.INTRA["nvlink"].busbw_bytes_per_s
    assert sum(sm.allreduce_s(8, big, topo)) == pytest.approx(expected)


def test_calibration_reproduces_its_fit_point_and_states_the_check(report: dict) -> None:
    cal = report["validation"]["isaac_lab"]
    assert cal["updates"] == 64 and cal["collectives_per_iteration"] == 201  # Isaac Lab's rl_games config
    for row in cal["rows"]:
        if row["fitted_here"]:
            assert row["sync_error"] == pytest.approx(0.0, abs=1e-9)
        if row["model"] == "nccl":  # the pure latency model misses most of what training loses
            assert row["sync_error"] < -0.5
    assert 0 < cal["overhead_s"]["per-collective"] < cal["overhead_s"]["per-update"]
    cpu = {r["lib"]: r for r in report["validation"]["cpu_gloo"]}
    assert set(cpu) == set(sm.LIBS)
    assert all(
        r["predicted_efficiency_1rank"] == 1.0 and 0 < r["predicted_efficiency_2ranks"] < 1 for r in cpu.values()
    )


def test_cli_writes_parsable_tables_and_rejects_bad_input(tmp_path: Path) -> None:
    script = str(ROOT / "scripts" / "scaling_model.py")
    out = tmp_path / "scaling.json"
    args = ["--gpus", "1,16,64", "--lib", "rsl_rl,skrl-jax", "--sync", "stock,fused", "--format", "json"]
    done = subprocess.run([sys.executable, script, *args, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    parsed = json.loads(out.read_text())
    assert {(p["lib"], p["gpus"]) for p in parsed["predictions"]} == {
        (lib, n) for lib in ("rsl_rl", "skrl-jax") for n in (1, 16, 64)
    }
    assert sm.markdown(parsed).count("\n| rsl_rl | fused |") == len(sm.MODELS)  # md renders the same data

    bad = subprocess.run([sys.executable, script, "--gpus", "0,128"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: gpus: ") and bad.stderr.count("\n") == 1
