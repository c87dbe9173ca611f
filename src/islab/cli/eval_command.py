"""The ``eval`` subcommand's options (its work: :mod:`islab.policy.evaluate`)."""

from __future__ import annotations

from typing import Annotated

import typer

from islab.cli.policy_command import RUN_DIR_ARGUMENT
from islab.policy.eval_plan import FORMS
from islab.policy.evaluate import DEFAULT_EPISODES
from islab.policy.evaluate import eval_command as run_eval

EVAL_HELP = (
    "Evaluate the run's kept checkpoints as play does (deterministic policy, N episodes each), spread over "
    "processes (one checkpoint per process at a time); writes RUN_DIR/eval.json and eval.png (return and success "
    "rate against iteration, the best marked); play --checkpoint best then plays the best. Only kept checkpoints "
    "can be evaluated (train with --keep-checkpoints N to keep more). Example: islab-train eval RUN_DIR --nproc 2"
)


def eval_command(
    run_dir: RUN_DIR_ARGUMENT,
    checkpoints: Annotated[str, typer.Option(help=f"Which kept checkpoints: {', '.join(FORMS)}.")] = "all",
    episodes: Annotated[
        int | None, typer.Option(help=f"Complete episodes per checkpoint. Default: {DEFAULT_EPISODES}.")
    ] = None,
    num_envs: Annotated[int | None, typer.Option(help="Parallel envs. Default: --episodes (at most 1024).")] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda (one process per visible GPU). Default: cpu.")] = None,
    nproc: Annotated[
        int | None, typer.Option(help="Evaluation processes. Default: one per core (cpu) or GPU (cuda).")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print eval.json.")] = False,
) -> None:
    raise typer.Exit(run_eval(run_dir, checkpoints=checkpoints, episodes=episodes, num_envs=num_envs, device=device,
                              nproc=nproc, json_output=json_output))  # fmt: skip
