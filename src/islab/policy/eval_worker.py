"""``python -m islab.policy.eval_worker RUN_DIR ...``: one evaluation process of ``islab-train eval``.

It evaluates one checkpoint at a time, as it is handed them: it reads a checkpoint path per line on
stdin and answers each with one JSON line on stdout, until stdin closes. Each evaluation is
``islab-train play``'s, with ``play``'s code (:func:`islab.policy.play.run_episodes` over the policy
:func:`islab.policy.loading.load_policy` rebuilds: the deterministic policy, the env reset with the
run's seed), so an evaluated checkpoint and a ``play --checkpoint <it> --episodes N --num-envs M``
of it give the same numbers. The library is imported once per process, not once per checkpoint.

The answer: ``{"iteration", "mean_return", "std_return", "success_rate", "episode_length",
"checkpoint", "policy_sha256", "worker", "wall_s", "success_measure"}``, or ``{"checkpoint", "error":
{"field", "problem", "fix"}}`` (an :class:`~islab.spec.issues.Issue`) for a checkpoint that cannot be
used. Whatever the libraries print goes to stderr (the process's
log, ``logs/eval_<I>.log``): stdout carries only the answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from islab.policy.play import run_episodes, spread
from islab.policy.source import resolve_source
from islab.spec.issues import Issue, SpecError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m islab.policy.eval_worker", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--num-envs", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--worker", type=int, default=0, help="this process's index (reported with each result)")
    return parser.parse_args(argv)


def evaluate_checkpoint(run_dir: Path, checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One checkpoint, as ``play`` evaluates it."""
    from islab.policy.loading import load_policy

    started = time.perf_counter()
    source = resolve_source(run_dir, str(checkpoint))
    loaded = load_policy(source, device=args.device, num_envs=args.num_envs)
    try:
        played = run_episodes(loaded.env, loaded.adapter.deterministic_actions, args.episodes, loaded.adapter.ctx.seed)
        success_measure = getattr(loaded.env, "success_measure", None)
    finally:
        loaded.close()
    returns, lengths, successes = played["returns"], played["lengths"], played["successes"]
    ret = spread(returns)
    return {
        "iteration": loaded.iteration,
        "mean_return": ret["mean"],
        "std_return": ret["std"],
        "success_rate": None if successes is None else sum(successes) / len(successes),
        "episode_length": sum(lengths) / len(lengths),
        "checkpoint": os.path.relpath(checkpoint, run_dir),
        "policy_sha256": loaded.policy_sha256,
        "worker": args.worker,
        "wall_s": time.perf_counter() - started,
        "success_measure": success_measure if successes is not None else None,
    }


def answer(checkpoint: Path, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from islab.policy.loading import PolicyLoadError

    try:
        return evaluate_checkpoint(run_dir, checkpoint, args)
    except PolicyLoadError as error:  # play says the same (exit 2)
        issue = Issue(error.field, str(error), "Pick another checkpoint or device")
    except SpecError as error:
        issue = error.issues[0]
    return {"checkpoint": str(checkpoint), "error": {"field": issue.field, "problem": issue.problem, "fix": issue.fix}}


def serve(lines: IO[str], answers: IO[str], args: argparse.Namespace) -> None:
    for line in lines:
        if line.strip():
            answers.write(json.dumps(answer(Path(line.strip()), args.run_dir, args)) + "\n")
            answers.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # stdout is the answers' channel: keep a handle on it, then send fd 1 (the libraries' prints,
    # C code's included) to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with answers:
        serve(sys.stdin, answers, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
