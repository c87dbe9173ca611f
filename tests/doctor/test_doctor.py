"""doctor: pure checks over gathered facts, the probes that gather them, and the command."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from paths import REPO

from islab.doctor import checks as doctor
from islab.doctor import facts as doctor_facts
from islab.doctor import probes
from islab.doctor import report as doctor_report
from islab.spec.run_spec import RunSpec

NVIDIA_SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""

pytestmark = pytest.mark.usefixtures("clean_environment")


def spec(**fields) -> RunSpec:
    return RunSpec(**fields)


def runtime(**fields) -> probes.Runtime:
    base = {"python": "3.11.7", "versions": {"islab-train": "0.1.0", "torch": "2.13.0", "rsl-rl-lib": "5.5.1"},
            "torch_cuda": "12.4", "nccl": "2.21.5", "gloo": True}  # fmt: skip
    return probes.Runtime(**{**base, **fields})


def rdzv(**fields) -> doctor_facts.Rendezvous:
    base = {"kind": "static master", "host": "node0", "port": 29500, "listens": True, "addresses": ("10.0.0.1",),
            "port_state": "free"}  # fmt: skip
    return doctor_facts.Rendezvous(**{**base, **fields})


# ----------------------------------------------------------------------------------------------
# Pure checks
# ----------------------------------------------------------------------------------------------


def test_gpus_against_processes():
    assert doctor.check_gpus(spec(device="cuda", nproc_per_node=2), 4).status == "pass"
    too_many = doctor.check_gpus(spec(device="cuda", nproc_per_node=4), 2)
    assert too_many.status == "fail" and "--gpus 2" in too_many.fix
    assert doctor.check_gpus(spec(device="cuda"), 0).status == "fail"
    assert doctor.check_gpus(spec(device="cpu", nproc_per_node=2), 0).status == "pass"


def test_gpus_are_counted_as_the_ranks_runtime_sees_them():
    """nvidia-smi -L lists a MIG-partitioned GPU once and CUDA_VISIBLE_DEVICES may name absent GPUs:
    the probed torch count decides, since each rank resolves its GPU from that view."""
    two = spec(device="cuda", nproc_per_node=2)
    short = doctor.check_gpus(two, 2, runtime(cuda_devices=1))
    assert short.status == "fail" and "--gpus 1" in short.fix
    assert "ranks' interpreter sees 1" in short.detail and "the launcher counted 2" in short.detail
    assert doctor.check_gpus(two, 1, runtime(cuda_devices=2)).status == "pass"
    assert doctor.check_gpus(two, 2, runtime(cuda_devices=None)).status == "pass"  # not probed: the cheap count


def test_jax_backend_must_be_gpu_for_a_cuda_skrl_jax_run():
    """Plain jax (the [jax] extra) has no GPU backend on Linux: skrl would train on the CPU."""
    jax_gpu = spec(lib="skrl", ml_framework="jax", device="cuda")
    on_cpu = doctor.check_jax_backend(jax_gpu, runtime(jax_backend="cpu"))
    assert on_cpu.status == "fail" and "'cpu'" in on_cpu.detail and "jax[cuda12]" in on_cpu.fix
    assert doctor.check_jax_backend(jax_gpu, runtime(jax_backend="gpu")).status == "pass"
    assert doctor.check_jax_backend(jax_gpu, runtime(jax_backend=None)).status == "fail"
    jax_cpu = spec(lib="skrl", ml_framework="jax", device="cpu", nproc_per_node=2)
    assert doctor.check_jax_backend(jax_cpu, runtime(jax_backend="cpu")).detail == "jax.default_backend() = 'cpu'"
    assert doctor.check_jax_backend(spec(device="cuda"), runtime()).status == "skip"  # no JAX in rsl_rl


def test_the_table_prints_fix_text_as_written_not_as_rich_markup():
    """Rich read `[cuda12]` in the JAX fix as a style tag and printed `pip install "jax"`."""
    from rich.console import Console

    from islab.libs.registry import JAX_CUDA_INSTALL

    checks = [doctor.check_jax_backend(spec(lib="skrl", ml_framework="jax", device="cuda"), runtime(jax_backend="cpu"))]
    facts = SimpleNamespace(spec=spec(lib="skrl", ml_framework="jax", device="cuda"), node_rank=0)
    console = Console(record=True, width=400)
    doctor_report.render_table(checks, facts, console)
    assert JAX_CUDA_INSTALL in console.export_text()


def test_the_jax_cuda_pin_is_the_jax_version_ci_tests():

    from islab.libs.registry import JAX_CUDA_INSTALL, JAX_TESTED_VERSION

    repo = REPO
    assert f"jax=={JAX_TESTED_VERSION}\n" in (repo / ".ci" / "constraints.txt").read_text()
    pinned = f'pip install "jax[cuda12]=={JAX_TESTED_VERSION}"'
    assert pinned == JAX_CUDA_INSTALL
    assert pinned in (repo / "README.md").read_text()


def test_backend_nccl_for_gpus_gloo_for_cpu():
    assert doctor.check_backend(spec(device="cuda"), runtime()).detail == "NCCL 2.21.5"
    cpu_build = doctor.check_backend(spec(device="cuda"), runtime(nccl=None, torch_cuda=None))
    assert cpu_build.status == "fail" and "CUDA build" in cpu_build.fix
    assert doctor.check_backend(spec(device="cpu"), runtime(nccl=None)).status == "pass"
    assert doctor.check_backend(spec(device="cpu"), runtime(gloo=False)).status == "fail"
    assert doctor.check_backend(spec(device="cpu"), None).status == "skip"


def test_driver_cuda_version_from_nvidia_smi_text():
    assert doctor.driver_cuda_version(NVIDIA_SMI) == (12, 4)
    assert doctor.driver_cuda_version("no header") is None
    cuda = spec(device="cuda")
    assert doctor.check_driver_cuda(cuda, NVIDIA_SMI, runtime(torch_cuda="12.1")).status == "pass"
    assert doctor.check_driver_cuda(cuda, NVIDIA_SMI, runtime(torch_cuda="12.4")).status == "pass"
    # A minor gap (driver 12.4, torch 12.8) runs by CUDA's minor-version compatibility: a warning.
    minor_gap = doctor.check_driver_cuda(cuda, NVIDIA_SMI, runtime(torch_cuda="12.8"))
    assert minor_gap.status == "warn" and "12.4" in minor_gap.detail and "driver" in minor_gap.fix
    # A major gap (driver 12.4, torch 13.0) cannot run: a failure.
    major_gap = doctor.check_driver_cuda(cuda, NVIDIA_SMI, runtime(torch_cuda="13.0"))
    assert major_gap.status == "fail" and "12.4" in major_gap.detail and "driver" in major_gap.fix
    assert doctor.check_driver_cuda(cuda, NVIDIA_SMI.replace("12.4", "11.8"), runtime(torch_cuda="12.1")).status == (
        "fail"
    )
    assert doctor.check_driver_cuda(cuda, None, runtime()).status == "fail"
    assert doctor.check_driver_cuda(spec(device="cpu"), None, None).status == "skip"


def test_socket_ifnames_follow_nccl_and_gloo_rules():
    interfaces = ["lo", "eth0", "ib0"]
    assert doctor.check_ifnames({}, interfaces).status == "pass"
    assert doctor.check_ifnames({"NCCL_SOCKET_IFNAME": "eth"}, interfaces).status == "pass"  # prefix
    assert doctor.check_ifnames({"NCCL_SOCKET_IFNAME": "^docker,eth0"}, interfaces).status == "pass"
    exact = doctor.check_ifnames({"NCCL_SOCKET_IFNAME": "=eth"}, interfaces)
    assert exact.status == "fail"
    bad = doctor.check_ifnames({"GLOO_SOCKET_IFNAME": "eth"}, interfaces)  # gloo: exact names
    assert bad.status == "fail" and "eth0" in bad.fix and "GLOO_SOCKET_IFNAME=eth" in bad.detail


def test_rendezvous_checks():
    assert doctor.check_resolves(rdzv()).status == "pass"
    unresolved = doctor.check_resolves(rdzv(addresses=(), resolve_error="Name or service not known"))
    assert unresolved.status == "fail" and "does not resolve" in unresolved.detail
    assert doctor.check_port(rdzv()).status == "pass"
    busy = doctor.check_port(rdzv(port_state="busy"))
    assert busy.status == "fail" and "29500" in busy.detail
    assert doctor.check_port(rdzv(port_state="not-local")).status == "warn"
    assert doctor.check_port(rdzv(listens=False, port_state="open")).status == "pass"
    refused = doctor.check_port(rdzv(listens=False, port_state="Connection refused"))
    assert refused.status == "fail" and "node 0" in refused.fix
    assert doctor.check_port(rdzv(listens=False, port_state=None)).status == "skip"


def test_public_rendezvous_address_is_a_warning():
    assert doctor.check_exposure(rdzv()).status == "pass"
    assert doctor.check_exposure(rdzv(addresses=("127.0.0.1",))).status == "pass"
    public = doctor.check_exposure(rdzv(addresses=("8.8.8.8",)))
    assert public.status == "warn" and "no authentication" in public.detail


def test_versions_disk_and_os():
    row = doctor.check_versions(spec(lib="rsl_rl"), runtime())
    assert row.status == "pass" and "torch 2.13.0" in row.detail and "python 3.11.7" in row.detail
    missing = doctor.check_versions(spec(lib="skrl"), runtime())
    assert missing.status == "fail" and "skrl" in missing.fix
    assert doctor.check_disk("/x", 50 * doctor.GIB).status == "pass"
    assert doctor.check_disk("/x", 3 * doctor.GIB).status == "warn"
    assert doctor.check_disk("/x", doctor.GIB // 2).status == "fail"
    assert doctor.check_os("linux").status == "pass"
    assert doctor.check_os("win32").status == "fail"


def test_cheap_subset_and_launch_messages():
    facts = doctor_facts.Facts(
        spec=spec(device="cpu"), node_rank=0, platform="linux", visible_gpus=0, interfaces=("lo",),
        socket_env={"GLOO_SOCKET_IFNAME": "eth9"}, nvidia_smi=None, disk_path="/", disk_free=100 * doctor.GIB,
        rendezvous=rdzv(addresses=("8.8.8.8",)),
    )  # fmt: skip
    checks = doctor.run_checks(facts, before_launch=True)
    cheap = [check.name for check in doctor.CHECKS if check.before_launch]
    assert [check.name for check in checks] == [name for name in [c.name for c in doctor.run_checks(facts)]
                                                 if name in cheap]  # fmt: skip
    errors, warnings = doctor_report.launch_messages(checks)
    assert len(errors) == 1 and errors[0].startswith("error: socket interfaces: GLOO_SOCKET_IFNAME=eth9")
    assert len(warnings) == 1 and "public address" in warnings[0]
    assert not doctor.all_passed(checks)


# ----------------------------------------------------------------------------------------------
# Probes
# ----------------------------------------------------------------------------------------------


def test_probe_runtime_reads_the_ranks_interpreter():
    real = probes.probe_runtime(sys.executable)
    assert real.python == sys.version.split()[0]
    assert real.versions["islab-train"] and real.gloo is True
    assert real.jax_backend is None  # JAX is probed only when asked (skrl-JAX runs)
    has_jax = importlib.util.find_spec("jax") is not None
    ranks_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}
    hidden = probes.probe_runtime(sys.executable, environ=ranks_env, jax=has_jax)
    assert hidden.cuda_devices == 0  # the ranks' environment (the spec's env:) reaches the probe
    assert hidden.jax_backend == ("cpu" if has_jax else None)
    missing = probes.probe_runtime("/nonexistent/python")
    assert missing.python is None and "cannot run" in (missing.error or "")
    crashed = probes.probe_runtime(
        "x", run=lambda *a, **k: SimpleNamespace(returncode=1, stdout="", stderr="ImportError: boom")
    )
    assert "ImportError: boom" in (crashed.error or "")


def test_the_probe_reports_what_torch_itself_says():
    """The probe reads a CPU-only build from torch/version.py without importing torch (doctor under
    2 s); what it reports must be what the imported torch says."""
    import torch
    import torch.distributed as dist

    probed = probes.probe_runtime(sys.executable, environ={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert probed.error is None, probed.error
    assert probed.torch_cuda == torch.version.cuda
    assert probed.gloo is dist.is_gloo_available()
    assert probed.cuda_devices == torch.cuda.device_count() == 0
    assert (probed.nccl is None) == (not dist.is_nccl_available())


def test_bind_and_connect_probes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert probes.bind_state("127.0.0.1", port) == "busy"
        assert probes.connect_state("127.0.0.1", port) == "open"
    assert probes.connect_state("127.0.0.1", port) != "open"
    assert probes.bind_state("127.0.0.1", port) == "free"
    assert probes.bind_state("192.0.2.1", 0) == "not-local"  # TEST-NET-1: not this machine's


# ----------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------


def test_doctor_json_passes_on_this_machine_for_cpu_ranks(islab, tmp_path):
    code, out, _ = islab("doctor", "--device", "cpu", "--nproc", "2", "--log-dir", str(tmp_path), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"], data
    names = {check["name"]: check["status"] for check in data["checks"]}
    assert names["collective backend (gloo)"] == "pass" and names["versions"] == "pass"
    assert list(tmp_path.iterdir()) == []  # doctor creates nothing


def test_doctor_fails_with_exit_1_and_a_table(islab, monkeypatch, tmp_path):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    code, out, _ = islab("doctor", "--device", "cpu", "--log-dir", str(tmp_path))
    assert code == 1
    assert "socket interfaces" in out and "fail" in out and "nosuchif0" in out
    code, out, _ = islab("doctor", "--gpus", "2", "--json", "--log-dir", str(tmp_path))
    statuses = {check["name"]: check["status"] for check in json.loads(out)["checks"]}
    assert code == 1 and statuses["GPUs vs processes"] == "fail"


def test_doctor_on_node_1_connects_to_node_0(islab, tmp_path):
    with socket.socket() as node0:
        node0.bind(("127.0.0.1", 0))
        node0.listen()
        port = str(node0.getsockname()[1])
        code, out, _ = islab("doctor", "--device", "cpu", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                             "127.0.0.1", "--master-port", port, "--json", "--log-dir", str(tmp_path))  # fmt: skip
    statuses = {check["name"]: check for check in json.loads(out)["checks"]}
    assert code == 0 and statuses["rendezvous port"]["detail"].endswith("accepts connections")
    code, out, _ = islab("doctor", "--device", "cpu", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                         "127.0.0.1", "--master-port", port, "--json", "--log-dir", str(tmp_path))  # fmt: skip
    assert code == 1  # nobody listens any more


def test_doctor_spec_errors_are_exit_2(islab):
    code, _, err = islab("doctor", "--num-envs", "0")
    assert code == 2 and err.startswith("error: num_envs")


def test_launch_is_stopped_by_the_cheap_checks(islab, monkeypatch, tmp_path):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    code, _, err = islab("--device", "cpu", "--log-dir", str(tmp_path / "L"))
    assert code == 2
    assert "error: socket interfaces: GLOO_SOCKET_IFNAME=nosuchif0" in err and "doctor" in err
    assert not (tmp_path / "L").exists()
    assert islab("--device", "cpu", "--log-dir", str(tmp_path / "L"), "--dry-run")[0] == 0  # not before a dry run


def test_doctor_does_not_import_torch_itself():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "islab.cli", "doctor", "--device", "cpu", "--json"],
        capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    assert "torch" not in imported and result.returncode == 0, result.stdout
