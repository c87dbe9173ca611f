"""``islab-train eval RUN``: every kept checkpoint evaluated, the best found (torch-free).

What it runs. ``--checkpoints`` picks checkpoints among those the run kept
(:mod:`islab.policy.eval_plan`); each is evaluated exactly as ``islab-train play`` evaluates one
(``--episodes`` complete episodes of the deterministic policy, the env reset with the run's seed:
every checkpoint meets the same start states). The checkpoints are spread over evaluation
processes (:mod:`islab.policy.eval_worker`), one checkpoint per process at a time: each process is
handed the next checkpoint when it finishes one, so a slow checkpoint holds up one process only.

Why processes and not torchrun ranks: the checkpoints are independent -- nothing is exchanged
between them, so a process group (rendezvous, a port, collectives) would add start-up cost and a
way to hang, and no gain; a process handed work over a pipe needs neither, and a crashed one costs
only its checkpoint. On the CPU ``--nproc N`` processes share the cores (``cores / N`` threads
each); on GPUs there is one process per visible GPU, each seeing only its own
(``CUDA_VISIBLE_DEVICES``). A process imports torch and the library once, then rebuilds env and
policy per checkpoint.

What it writes: ``RUN/eval.json`` ``{"checkpoints": [{"iteration", "mean_return", "std_return",
"success_rate", "episode_length", ...}], "best": {...}, ...}`` (``--json`` prints it), and
``RUN/eval.png`` (:mod:`islab.policy.eval_report`). ``best`` is the checkpoint with the highest
mean return (equal returns: the later iteration); ``play --checkpoint best`` then plays it
(:func:`islab.rundir.evaluated_best`). Each evaluation replaces the last one. Nothing is written when
a checkpoint cannot be evaluated.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from islab import rundir
from islab.policy import eval_plan, eval_report
from islab.policy.isaaclab_play import isaaclab_run
from islab.policy.loading import job_free_environment
from islab.policy.source import read_run_spec, train_again_command
from islab.spec.issues import Issue, SpecError
from islab.spec.worker_args import default_of

DEFAULT_EPISODES = 32  # play's default
DEVICES = ("cpu", "cuda")
WORKER_MODULE = "islab.policy.eval_worker"


def _isaaclab_refusal(run_dir: str | Path) -> Issue:
    return Issue(
        "RUN_DIR", f"{run_dir} is a run of Isaac Lab's trainer (--isaaclab); islab-train eval evaluates islab's own "
        "checkpoints only (Isaac Lab's play reports no metrics islab can read)",
        f"Play one of its checkpoints with Isaac Lab's play: islab-train play {run_dir} --seconds 60",
    )  # fmt: skip


def no_checkpoints(run_dir: Path, spec: dict[str, Any]) -> SpecError:
    again = train_again_command(run_dir)
    return SpecError(
        Issue(
            "RUN_DIR",
            f"{run_dir} has no islab checkpoint to evaluate (no {rundir.CHECKPOINTS_DIR}/"
            f"{rundir.HISTORY_PREFIX}<N>.pt nor {rundir.LATEST_CHECKPOINT}): its training stopped (or is still "
            f"running) before the first one, which comes after {spec.get('checkpoint_interval', '?')} iteration(s)",
            "Train it again (--checkpoint-interval N saves every N iterations, --keep-checkpoints N keeps the "
            "newest N)" + (f": {again}" if again else ""),
        )
    )


def plan(
    run_dir: Path, form: str, episodes: int, num_envs: int | None, device: str, nproc: int | None
) -> tuple[dict[str, Any], list[eval_plan.Candidate], int]:
    """Check everything before anything starts: (the run's spec, the checkpoints, processes);
    SpecError (exit 2) for bad input."""
    for option, value in (("--episodes", episodes), ("--num-envs", num_envs)):
        if value is not None and value < 1:
            raise SpecError(Issue(option, f"must be at least 1, got {value}", f"Give e.g. {option} 32"))
    if device not in DEVICES:
        raise SpecError(Issue("--device", f"{device!r} is not one of {', '.join(DEVICES)}", "Use --device cpu"))
    spec = read_run_spec(run_dir)
    eval_plan.parse_form(form)
    kept, latest = eval_plan.kept_checkpoints(run_dir)
    if not kept and latest is None:
        raise no_checkpoints(run_dir, spec)
    best = rundir.best_checkpoint(run_dir)[0] if form == "best" else None
    candidates = eval_plan.select(form, kept, latest, best)
    if not candidates:
        raise eval_plan.nothing_to_evaluate(form, list(kept))
    gpus = 0
    if device == "cuda":
        from islab.doctor.probes import visible_gpu_count

        gpus = visible_gpu_count()
    processes = eval_plan.process_count(nproc, len(candidates), device, os.cpu_count() or 1, gpus)
    return spec, candidates, processes


def worker_environments(spec: dict[str, Any], device: str, processes: int) -> list[dict[str, str]]:
    """Each evaluation process's environment: the job's rank variables dropped, the library's
    fixes, its share of the cores (CPU) or its own GPU."""
    from islab.spec.worker_args import THREADS_VARIABLE

    base = job_free_environment(dict(os.environ), str(spec["lib"]), str(spec.get("ml_framework") or "torch"), device)
    if device == "cuda":
        ids = eval_plan.visible_gpu_ids(os.environ.get("CUDA_VISIBLE_DEVICES"), processes)
        return [{**base, "CUDA_VISIBLE_DEVICES": gpu} for gpu in ids]
    threads = str(eval_plan.threads_per_process(os.cpu_count() or 1, processes))
    return [{**base, THREADS_VARIABLE: base.get(THREADS_VARIABLE) or threads} for _ in range(processes)]


def run_workers(
    run_dir: Path,
    candidates: Sequence[eval_plan.Candidate],
    command: Callable[[int], list[str]],
    environments: Sequence[dict[str, str]],
    on_answer: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """Start one process per environment; hand each the next checkpoint whenever it is free; the
    answers (a crashed process: an error answer for the checkpoint it held, the rest go to the others)."""
    pending = deque(candidates)
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    rundir.logs_dir(run_dir).mkdir(parents=True, exist_ok=True)

    def take() -> eval_plan.Candidate | None:
        with lock:
            return pending.popleft() if pending else None

    def drive(index: int) -> None:
        log_path = rundir.eval_worker_log(run_dir, index)
        with log_path.open("w", encoding="utf-8") as log:
            process = subprocess.Popen(command(index), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                       env=environments[index], text=True)  # fmt: skip
            try:
                while (candidate := take()) is not None:
                    answer = ask(process, candidate)
                    if answer is None:
                        answer = crashed(candidate, f"evaluation process {index} exited with status {process.wait()}",
                                         f"See its output in {log_path}")  # fmt: skip
                    with lock:
                        answers.append(answer)
                        on_answer(answer)
                    if answer.get("crashed"):
                        break
            finally:
                with contextlib.suppress(OSError):  # a dead process's pipe
                    process.stdin.close()
                process.wait()

    threads = [
        threading.Thread(target=drive, args=(index,), name=f"eval-{index}") for index in range(len(environments))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # every process died: what nobody took is not evaluated either
    answers += [crashed(candidate, "every evaluation process exited before it", "See logs/eval_<I>.log in the run")
                for candidate in pending]  # fmt: skip
    return answers


def ask(process: subprocess.Popen, candidate: eval_plan.Candidate) -> dict[str, Any] | None:
    """Hand ``process`` one checkpoint; its answer, or None when it died (or answered garbage)."""
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(f"{candidate.path}\n")
        process.stdin.flush()
        line = process.stdout.readline()
    except OSError:
        return None
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def crashed(candidate: eval_plan.Candidate, problem: str, fix: str) -> dict[str, Any]:
    return {
        "checkpoint": str(candidate.path),
        "crashed": True,
        "error": {"field": "--checkpoints", "problem": f"{candidate.path} was not evaluated: {problem}", "fix": fix},
    }


def best_of(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The highest mean return; equal returns: the later iteration (as ``best`` during training)."""
    return max(entries, key=lambda entry: (entry["mean_return"], entry["iteration"]))


def evaluation_record(
    run_dir: Path, spec: dict[str, Any], form: str, settings: dict[str, Any], answers: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """``eval.json``: the settings, every checkpoint in iteration order, the best."""
    measures = {answer.pop("success_measure", None) for answer in answers}
    entries = sorted(answers, key=lambda entry: entry["iteration"])
    return {
        "run_dir": str(run_dir),
        "lib": spec["lib"],
        "ml_framework": spec.get("ml_framework") or "torch",
        "task": spec["task"],
        "checkpoints_form": form,
        **settings,
        "seed": int(spec.get("seed", default_of("seed"))),
        "success_measure": next(iter(measures - {None}), None),
        rundir.EVALUATED_KEY: entries,
        "best": best_of(entries),
    }


def eval_command(
    run_dir: str | Path,
    *,
    checkpoints: str = "all",
    episodes: int | None = None,
    num_envs: int | None = None,
    device: str | None = None,
    nproc: int | None = None,
    json_output: bool = False,
    python: str | None = None,
) -> int:
    """``islab-train eval``: exit status (0 done, 2 bad input or a checkpoint it cannot use, 1 a crash)."""
    if isaaclab_run(run_dir) is not None:
        print(_isaaclab_refusal(run_dir).message(), file=sys.stderr)
        return 2
    directory = Path(run_dir).expanduser()
    episodes = DEFAULT_EPISODES if episodes is None else episodes
    device = device or "cpu"
    try:
        spec, candidates, processes = plan(directory, checkpoints, episodes, num_envs, device, nproc)
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    envs = num_envs or min(episodes, 1024)  # play's default

    def command(index: int) -> list[str]:
        return [python or sys.executable, "-m", WORKER_MODULE, str(directory), "--episodes", str(episodes),
                "--num-envs", str(envs), "--device", device, "--worker", str(index)]  # fmt: skip

    print(eval_report.starting_line(spec, len(candidates), episodes, processes, device), file=sys.stderr, flush=True)
    started = time.perf_counter()
    done: list[int] = []

    def on_answer(answer: dict[str, Any]) -> None:
        done.append(1)
        print(eval_report.progress_line(answer, len(done), len(candidates)), file=sys.stderr, flush=True)

    environments = worker_environments(spec, device, processes)
    answers = run_workers(directory, candidates, command, environments, on_answer)
    failed = [answer for answer in answers if "error" in answer]
    if failed:
        for answer in failed:
            print(Issue(**answer["error"]).message(), file=sys.stderr)
        print(f"islab-train eval: nothing written ({len(failed)} of {len(candidates)} checkpoint(s) not evaluated)",
              file=sys.stderr)  # fmt: skip
        return 1 if any(answer.get("crashed") for answer in failed) else 2
    settings = {"episodes": episodes, "num_envs": envs, "device": device, "processes": processes,
                "wall_s": round(time.perf_counter() - started, 3)}  # fmt: skip
    evaluation = evaluation_record(directory, spec, checkpoints, settings, answers)
    rundir.write_json(rundir.eval_path(directory), evaluation)
    plot = eval_report.draw(evaluation, rundir.read_progress(rundir.progress_path(directory)),
                            rundir.eval_plot_path(directory))  # fmt: skip
    print(json.dumps(evaluation, indent=2) if json_output else eval_report.render(evaluation, plot), flush=True)
    return 0
