"""GPU acceptance check: the first thing to run on a machine with one or more GPUs.

No GPU has run islab-train's CUDA path in CI (CI machines have none), so when a GPU machine is at
hand this script exercises everything that differs on one, in a fixed order, and writes ONE
Markdown report with every command, its exit status, its wall time and the figures it produced:

  1. facts       nvidia-smi -L, torch / CUDA / NCCL versions and the devices CUDA exposes, JAX devices
  2. doctor      ``islab-train doctor --gpus all --json`` (every check must pass or warn)
  3. pre-flight  ``islab-train doctor --collectives --json`` when this islab-train has it
  4. training    every library path (rsl_rl, rl_games, skrl-torch, skrl-JAX) for a few iterations on
                 1 GPU and on all GPUs; figures from each run's summary.json
  5. policy      play of a GPU-trained checkpoint on the GPU and on the CPU, and export
  6. scale       (GPUs) ``islab-train scale`` at 1..N GPUs: efficiency, NCCL's all-reduce, the limit line
  7. placement   (2+ GPUs) two ranks of a script on GPU 0 named within seconds with the fix; with the
                 fix, each rank's GPU memory and utilisation (NVML) in the summary
  8. host syncs  the host syncs per env step of our code, under ``torch.cuda.set_sync_debug_mode``
  9. bench       ``scripts/bench.py --device cuda --sections env train``

A step that fails does not stop the later ones (the report should show everything at once); the
exit status is 0 when every step passed, 1 when any failed, 2 for bad arguments (or no GPU).
``--device cpu`` runs the same steps on CPU ranks (``--nproc``), which is how its own tests
exercise it on machines without GPUs; ``--dry-run`` lists the steps and their commands only.

    scripts/gpu_acceptance.sh                          # everything, report: gpu_acceptance.md
    scripts/gpu_acceptance.sh --libs rsl_rl --skip-bench --out /tmp/report.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LIBRARY_PATHS = {  # name in the report -> islab-train options
    "rsl_rl": ["--lib", "rsl_rl"],
    "rl_games": ["--lib", "rl_games"],
    "skrl-torch": ["--lib", "skrl", "--ml-framework", "torch"],
    "skrl-jax": ["--lib", "skrl", "--ml-framework", "jax"],
}
REPO = Path(__file__).resolve().parent.parent
FACTS_PROBE = """
import json, torch
facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": torch.cuda.device_count()}
if torch.cuda.is_available():
    facts["names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
try:
    import jax
    facts["jax"] = jax.__version__
    facts["jax_devices"] = [str(device) for device in jax.devices()]
except Exception as error:  # jax missing, or jax[cuda12] absent: say so, do not fail the probe
    facts["jax"] = f"unavailable ({type(error).__name__}: {error})"
print(json.dumps(facts))
"""


@dataclass
class Step:
    """One command of the check; ``figures`` reads what it produced (after it ran)."""

    section: str
    name: str
    argv: list[str]
    figures: Callable[[str], dict[str, object]] = lambda output: {}
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 1800.0
    expect_status: int = 0  # a check that islab-train refuses something exits 1
    reads_stderr: bool = False  # its figures come from stderr too (an error line)


@dataclass
class Result:
    step: Step
    status: int | None  # None: did not finish within its timeout
    wall_s: float
    figures: dict[str, object]
    tail: list[str]

    @property
    def passed(self) -> bool:
        return self.status == self.step.expect_status and not self.figures.get("problem")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_acceptance.md"), help="the Markdown report")
    parser.add_argument("--work-dir", type=Path, default=Path("logs/gpu_acceptance"), help="run directories")
    parser.add_argument("--libs", nargs="+", default=list(LIBRARY_PATHS), help=f"of {', '.join(LIBRARY_PATHS)}")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--gpus", type=int, help="'all GPUs' (default: every device CUDA exposes)")
    parser.add_argument("--nproc", type=int, default=2, help="with --device cpu: the 'all' rank count")
    parser.add_argument("--iterations", type=int, default=5, help="training iterations per library path")
    parser.add_argument("--num-envs", type=int, default=4096, help="envs per rank")
    parser.add_argument("--task", default="Islab-Cartpole-v0")
    parser.add_argument("--python", default=sys.executable, help="interpreter with islab-train installed")
    parser.add_argument("--skip-bench", action="store_true", help="leave out scripts/bench.py (the longest step)")
    parser.add_argument("--dry-run", action="store_true", help="list the steps and their commands, run nothing")
    args = parser.parse_args(argv)
    unknown = [lib for lib in args.libs if lib not in LIBRARY_PATHS]
    if unknown:
        parser.error(f"--libs: unknown {', '.join(unknown)}; choose from {', '.join(LIBRARY_PATHS)}")
    for name in ("iterations", "num_envs", "nproc"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.gpus is not None and args.gpus < 1:
        parser.error("--gpus must be at least 1 (leave it out to use every GPU CUDA exposes)")
    return args


def visible_gpus(python: str) -> int:
    """The devices CUDA exposes to the ranks' interpreter (MIG instances and CUDA_VISIBLE_DEVICES
    included), asked of torch in a child process, as the ranks will see them."""
    probe = [python, "-c", "import torch; print(torch.cuda.device_count())"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


def rank_counts(args: argparse.Namespace, gpus: int) -> list[int]:
    """1 and 'all' (once when they are the same)."""
    every = args.nproc if args.device == "cpu" else gpus
    return sorted({1, every})


def placement(args: argparse.Namespace, ranks: int) -> list[str]:
    return ["--device", "cpu", "--nproc", str(ranks)] if args.device == "cpu" else ["--gpus", str(ranks)]


def run_dir_figures(log_dir: Path) -> Callable[[str], dict[str, object]]:
    """The figures of the one run under ``log_dir``: its summary.json."""

    def read(_output: str) -> dict[str, object]:
        from islab import rundir  # the run directory's layout has one home

        summaries = sorted(log_dir.glob(f"**/{rundir.SUMMARY_FILE}"))
        if not summaries:
            return {"problem": f"no {rundir.SUMMARY_FILE} under {log_dir}"}
        summary = json.loads(summaries[-1].read_text())
        keep = ("iterations", "env_steps", "wall_s", "env_steps_per_s", "mean_return", "world_size")
        return {"run_dir": str(summaries[-1].parent), **{key: summary[key] for key in keep if key in summary}}

    return read


def json_figures(*keys: str) -> Callable[[str], dict[str, object]]:
    """Figures from a command that prints one JSON object (its last line of JSON)."""

    def read(output: str) -> dict[str, object]:
        start = output.find("{")
        try:
            data = json.loads(output[start:]) if start >= 0 else None
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return {"problem": "no JSON object in the output"}
        figures = {key: data[key] for key in keys if key in data}
        if data.get("ok") is False:
            failed = [check["name"] for check in data.get("checks", []) if check.get("status") == "fail"]
            figures["problem"] = f"not ok: {', '.join(failed) or 'see output'}"
        return figures

    return read


def host_sync_figures(output: str) -> dict[str, object]:
    """``python -m islab.worker.host_syncs --json``: per library, our rollout's host syncs per
    iteration (must be 0) and the libraries' total; under CUDA they come from set_sync_debug_mode too."""
    lines = [line for line in output.splitlines() if line.startswith("[")]
    try:
        results = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        results = None
    if not isinstance(results, list):
        return {"problem": "no JSON list in the output"}
    figures: dict[str, object] = {}
    ours_in_rollout = []
    for result in results:
        ours = result["rollout_per_iteration"].get("islab", 0.0)
        theirs = sum(count for origin, count in result["per_iteration"].items() if origin != "islab")
        figures[result["lib"]] = f"islab rollout {ours:g}, libraries {theirs:g} per iteration"
        if ours:
            ours_in_rollout.append(result["lib"])
    if ours_in_rollout:
        figures["problem"] = f"islab code syncs the host in the rollout of {', '.join(ours_in_rollout)}"
    return figures


def plan_steps(args: argparse.Namespace, gpus: int, has_collectives: bool) -> list[Step]:
    """Every step, in order; pure (no command runs here)."""
    islab = [args.python, "-m", "islab.cli"]
    work = args.work_dir
    every = rank_counts(args, gpus)[-1]
    facts = json_figures("torch", "cuda", "nccl", "devices", "names", "jax", "jax_devices")
    steps = [Step("facts", "torch, CUDA, NCCL, JAX", [args.python, "-c", FACTS_PROBE], facts)]
    if args.device == "cuda":
        steps.append(Step("facts", "nvidia-smi -L", ["nvidia-smi", "-L"]))
    steps.append(Step("doctor", "doctor", [*islab, "doctor", *placement(args, every), "--json"], json_figures("ok")))
    if has_collectives:
        preflight = [*islab, "doctor", "--collectives", *placement(args, every), "--json"]
        steps.append(Step("pre-flight", "collectives", preflight, json_figures("ok", "all_reduce", "seconds")))
    first_run: Path | None = None
    for lib in args.libs:
        for ranks in rank_counts(args, gpus):
            log_dir = work / f"{lib}-{ranks}"
            argv = [*islab, *LIBRARY_PATHS[lib], "--task", args.task, *placement(args, ranks),
                    "--num-envs", str(args.num_envs), "--max-iterations", str(args.iterations),
                    "--log-dir", str(log_dir)]  # fmt: skip
            steps.append(Step("training", f"{lib} on {ranks} rank(s)", argv, run_dir_figures(log_dir)))
            first_run = first_run or log_dir
    if first_run is not None:
        run = str(first_run / "**")  # resolved when the step runs (the run directory has a time in its name)
        played = json_figures("return", "episodes", "device")
        for device in dict.fromkeys((args.device, "cpu")):
            play = [*islab, "play", run, "--device", device, "--episodes", "32", "--json"]
            steps.append(Step("policy", f"play on {device}", play, played))
        steps.append(Step("policy", "export", [*islab, "export", run]))
    # islab-train fit on one rank's device: the allocator's peak + NVML's process memory, steps/s per size,
    # a size out of memory as a row (docs/FIT.md); only a GPU checks its GPU path for real
    fit = [*islab, "fit", *LIBRARY_PATHS[args.libs[0]], "--task", args.task, *placement(args, 1),
           "--min-num-envs", str(args.num_envs), "--json"]  # fmt: skip
    if args.device == "cpu":  # the CPU rehearsal of the check: one size, one iteration (the range takes minutes)
        fit += ["--max-num-envs", str(args.num_envs), "--iterations", "1"]
    steps.append(Step("fit", "num_envs on one device", fit, json_figures("recommended", "knee", "memory_limit_bytes")))
    if args.device == "cuda":  # on CPU ranks tests/scale runs it (~50 s: not repeated in the rehearsal)
        # islab-train scale: the job at 1..N GPUs, the pre-flight's all-reduce (NCCL), the limit line
        scale = [*islab, "scale", *LIBRARY_PATHS[args.libs[0]], "--task", args.task, *placement(args, every),
                 "--num-envs", str(args.num_envs), "--iterations", str(max(2, args.iterations)), "--json"]  # fmt: skip
        scaled = json_figures("rows", "limit", "prediction", "all_reduce")
        steps.append(Step("scale", f"1..{every} ranks", scale, scaled))
    if args.device == "cuda" and gpus >= 2:
        steps += placement_steps(islab)
    syncs = [args.python, "-m", "islab.worker.host_syncs", "--device", args.device, "--json"]
    syncs += [item for lib in args.libs for item in ("--lib", lib)]
    steps.append(Step("host syncs", "per iteration", syncs, host_sync_figures))
    if not args.skip_bench:
        bench_out = work / "bench"
        bench = [args.python, str(REPO / "scripts" / "bench.py"), "--device", args.device,
                 "--sections", "env", "train", "--out", f"{bench_out}.md", "--json", f"{bench_out}.json"]  # fmt: skip
        steps.append(Step("bench", "env + train", bench))
    return steps


def line_figures(wanted: str) -> Callable[[str], dict[str, object]]:
    """The output's first line holding ``wanted``, else a problem."""

    def read(output: str) -> dict[str, object]:
        found = next((line for line in output.splitlines() if wanted in line), None)
        return {"line": found} if found else {"problem": f"no line with {wanted!r} in the output"}

    return read


def placement_steps(islab: list[str]) -> list[Step]:
    """NVML seen from the launcher (islab.run.gpu_watch), real GPUs: a script whose 2 ranks both sit on
    GPU 0 is stopped within seconds naming them and the fix (exit 1); with its device set from
    LOCAL_RANK it runs, and the summary shows each rank's GPU memory and utilisation."""
    script = str(REPO / "scripts" / "gpu_checks" / "placement.py")
    shared = [*islab, "--gpus", "2", "--script", script]
    fixed = [*islab, "--gpus", "2", "--script", script, "--", "--set-device"]
    return [
        Step("placement", "2 ranks on GPU 0 named", shared, line_figures("are all on GPU 0"), timeout_s=120,
             expect_status=1, reads_stderr=True),
        Step("placement", "GPU per rank in the summary", fixed, line_figures("GPU per rank (peak)"), timeout_s=180),
    ]  # fmt: skip


def expand_run_dir(argv: list[str]) -> list[str]:
    """``<log_dir>/**`` in a play/export step -> the run directory the training step made."""
    from islab import rundir

    out = []
    for item in argv:
        if item.endswith("/**"):
            found = sorted(Path(item[:-3]).glob(f"**/{rundir.SUMMARY_FILE}"))
            item = str(found[-1].parent) if found else item[:-3]
        out.append(item)
    return out


def run_step(step: Step) -> Result:
    argv = expand_run_dir(step.argv)
    step.argv = argv
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=step.timeout_s, check=False,
                              env={**os.environ, **step.env}, cwd=REPO)  # fmt: skip
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as timeout:
        status, output = None, f"{timeout.stdout or ''}{timeout.stderr or ''}\n(timed out after {step.timeout_s:.0f} s)"
    except OSError as error:
        status, output = 127, f"{error}"
    wall = time.monotonic() - start
    read = (done.stdout + done.stderr if step.reads_stderr else done.stdout) if status == step.expect_status else ""
    figures = step.figures(read) if status == step.expect_status else {}
    return Result(step, status, wall, figures, output.splitlines()[-15:])


def render_report(results: Sequence[Result], args: argparse.Namespace, started: str) -> str:
    """The Markdown report: verdict, one table row per step, figures, then the failed steps' output."""
    failed = [result for result in results if not result.passed]
    verdict = "PASS" if not failed else f"FAIL ({len(failed)} of {len(results)} steps)"
    lines = [
        "# islab-train GPU acceptance report",
        "",
        f"- verdict: **{verdict}**",
        f"- started: {started}; host: {platform.node()}; device: {args.device}",
        f"- command: `{shlex.join([sys.argv[0], *sys.argv[1:]])}`",
        "",
        "| section | step | status | wall s | figures | command |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        status = "timeout" if result.status is None else ("pass" if result.passed else f"FAIL ({result.status})")
        figures = "; ".join(f"{key}={value}" for key, value in result.figures.items()).replace("|", "/")
        command = shlex.join(result.step.argv).replace("|", "\\|")
        if len(command) > 300:  # the probe's program text: the table keeps its head
            command = command[:300] + " ..."
        lines.append(f"| {result.step.section} | {result.step.name} | {status} | {result.wall_s:.1f} | "
                     f"{figures} | `{command}` |")  # fmt: skip
    for result in failed:
        lines += ["", f"## {result.step.section}: {result.step.name} failed", "", "```", *result.tail, "```"]
    bench = args.work_dir / "bench.md"
    if any(result.step.section == "bench" for result in results) and bench.is_file():
        lines += ["", "## scripts/bench.py report", "", bench.read_text()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    gpus = args.gpus or (visible_gpus(args.python) if args.device == "cuda" else 0)
    if args.device == "cuda" and gpus == 0 and not args.dry_run:
        print("error: --device cuda: CUDA exposes no GPU to "
              f"{args.python} (torch.cuda.device_count() is 0). Run this on a GPU machine with a CUDA build of "
              "torch, or use --device cpu to exercise the check on CPU ranks.", file=sys.stderr)  # fmt: skip
        return 2
    help_text = subprocess.run([args.python, "-m", "islab.cli", "doctor", "--help"], capture_output=True, text=True,
                               check=False).stdout  # fmt: skip
    steps = plan_steps(args, max(gpus, 1), has_collectives="--collectives" in help_text)
    if args.dry_run:
        for step in steps:
            print(f"[{step.section}] {step.name}: {shlex.join(step.argv)}")
        return 0
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    results = []
    for step in steps:
        print(f"[{step.section}] {step.name} ...", flush=True)
        results.append(run_step(step))
        print(f"    {'pass' if results[-1].passed else 'FAIL'} in {results[-1].wall_s:.1f} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_report(results, args, started))
    print(f"report: {args.out}")
    return 0 if all(result.passed for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
