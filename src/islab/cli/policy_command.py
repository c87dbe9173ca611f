"""The ``play`` and ``export`` subcommands' options (their work: :mod:`islab.policy.cli_commands`).

``play RUN_DIR`` and ``export RUN_DIR`` take a run islab's worker trained, or a run of Isaac Lab's
trainer (``--isaaclab``), which Isaac Lab's own play plays and exports
(:mod:`islab.policy.isaaclab_play`); each kind of run takes its own options, and the other's are
refused with exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from islab.policy import cli_commands as policy_commands

RUN_DIR_ARGUMENT = Annotated[
    Path, typer.Argument(help="A run directory (<log_dir>/<lib>/<task>/<time>).", show_default=False)
]
CHECKPOINT_OPTION = Annotated[
    str,
    typer.Option(
        help="latest, best (best in the last islab-train eval; else highest mean return during training "
        "among the kept checkpoints) or a path."
    ),
]
PLAY_HELP = (
    "Run a trained policy deterministically for N episodes: mean/std/min/max of episode return and "
    "length (and the task's success rate); writes RUN_DIR/play.json. A run of Isaac Lab's trainer is played by "
    "Isaac Lab's own play (until --seconds S, or one --video clip). Example: islab-train play RUN_DIR --episodes 64"
)
EXPORT_HELP = (
    "Write RUN_DIR/exported/policy.pt (TorchScript), policy.onnx and policy.json: raw observations -> "
    "deterministic actions, observation normalizer folded in. A run of Isaac Lab's rsl_rl trainer: its play's "
    "exported/policy.pt and .onnx beside the checkpoint. Example: islab-train export RUN_DIR"
)


def play_command(
    run_dir: RUN_DIR_ARGUMENT,
    checkpoint: CHECKPOINT_OPTION = "latest",
    episodes: Annotated[int | None, typer.Option(help="Complete episodes to run. Default: 32.")] = None,
    num_envs: Annotated[int | None, typer.Option(help="Parallel envs. Default: --episodes (at most 1024).")] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda (Isaac Lab: its --device). Default: cpu.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    video: Annotated[
        bool,
        typer.Option(
            "--video", help="Also record an MP4 into RUN_DIR/videos/play/ (Isaac Lab's trainer: one clip, then stop)."
        ),
    ] = False,
    video_length: Annotated[
        int | None, typer.Option(help="Frames of the video at most. Default: until the recorded episodes end.")
    ] = None,
    envs: Annotated[int | None, typer.Option(help="Envs shown in the video, tiled. Default: 1.")] = None,
    seconds: Annotated[
        float | None, typer.Option(help="Isaac Lab's trainer: stop its play (SIGINT) after S s.")
    ] = None,
) -> None:
    raise typer.Exit(policy_commands.play_command(
        run_dir, checkpoint=checkpoint, episodes=episodes, num_envs=num_envs, device=device, json_output=json_output,
        video=video, video_length=video_length, seconds=seconds, envs=envs,
    ))  # fmt: skip


def export_command(run_dir: RUN_DIR_ARGUMENT, checkpoint: CHECKPOINT_OPTION = "latest") -> None:
    raise typer.Exit(policy_commands.export_command(run_dir, checkpoint=checkpoint))
