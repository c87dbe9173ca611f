"""``islab-train``: the command line in front of the spec, the planner and the supervisor.

* :mod:`islab.cli.options` -- the option table: every option once, with its help, panel,
  ``ISLAB_*`` variable and spec field;
* :mod:`islab.cli.spec_layers` -- options and ``ISLAB_*`` variables -> spec layers -> a resolved spec;
* :mod:`islab.cli.app` -- the training command (resolve, plan, check, launch);
* :mod:`islab.cli.commands` -- ``doctor``, ``sbatch`` and ``tasks``;
* here -- :func:`run` (the entry point tests call in-process) and :func:`main` (the console script
  ``islab-train`` and ``python -m islab.cli``).

The training command takes trailing KEY=VALUE arguments, which a click group cannot combine with
subcommand names; so :func:`run` dispatches on the first argument instead.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Any

import typer

from islab.cli import spec_layers
from islab.cli.app import PROG, SUBCOMMANDS, app
from islab.cli.commands import commands
from islab.cli.isaaclab_spelling import ISAACLAB_SCRIPT_FLAGS, isaaclab_spelling_issue
from islab.cli.options import BY_NAME, OPTIONS
from islab.cli.spec_layers import source_of
from islab.fit.auto import environment_auto_taken, take_auto
from islab.preflight.quick_exit import end
from islab.spec.issues import Issue, suggest
from islab.spec.text import escape

# Characters that typesetting puts where "--" was meant (the Chinese edition of Isaac Lab's guide
# prints "–distributed"); argparse/click would report a confusing "unexpected argument".
# Subcommands that resolve a training spec, and so take an entry point's arguments after `--`.
SPEC_SUBCOMMANDS = ("doctor", "sbatch", "k8s", "sky", "fit", "scale")

LOOKALIKE_DASHES = "\u2013\u2014\u2212\u2010\u2011\u2012\ufe63\uff0d"


def lookalike_dash_issue(args: list[str]) -> Issue | None:
    """An argument typed with an en/em dash instead of "--" (copy-pasted from typeset docs). The
    hint names an option only when islab-train has it; Isaac Lab script flags are sent after `--`."""
    for arg in args:
        if arg and arg[0] in LOOKALIKE_DASHES:
            name = arg.lstrip(LOOKALIKE_DASHES + "-").split("=")[0]
            problem = f"starts with the typographic dash {arg[0]!r} (U+{ord(arg[0]):04X}), not '--'"
            flags = {flag for option in OPTIONS for flag in option.flag.split("/")}
            meant = f"--{name.replace('_', '-')}"
            if meant in flags:
                fix = f"did you mean {meant}? Retype the dashes as two ASCII hyphens"
            elif name in ISAACLAB_SCRIPT_FLAGS:
                fix = (f"--{name} is a flag of Isaac Lab's train.py, not of {PROG}: put it after -- "
                       "(e.g. --script train.py -- --" + name + "); with --isaaclab DIR, --headless and "
                       "--distributed are set for you")  # fmt: skip
            else:
                fix = f"{PROG} has no option --{name}; retype the dashes as two ASCII hyphens (see {PROG} --help)"
            return Issue(f"argument {arg!r}", problem, fix)
    return None


def _bad_parameter_issue(exc: Any) -> Issue:
    """click/typer's "Invalid value for ..." -> our one-line error with the field and a fix."""
    from typer._click import exceptions as click_exceptions  # typer vendors click

    param = exc.param
    if isinstance(exc, click_exceptions.MissingParameter) and getattr(param, "name", None) == "run_dir":
        command = exc.ctx.info_name if exc.ctx is not None else "play"
        return Issue(
            "RUN_DIR", "the run directory is missing",
            f"Name the run to use, e.g. '{PROG} {command} logs/rsl_rl/Islab-Cartpole-v0/<run>' "
            "(a training run prints its run directory at the end)",
        )  # fmt: skip
    name = getattr(param, "name", None) or "value"
    option = max(getattr(param, "opts", None) or [name], key=len)
    label = option
    if exc.ctx is not None and name in BY_NAME and source_of(exc.ctx, name) == "ENVIRONMENT":
        label = f"{option} (from {BY_NAME[name].envvar})"
    cause = exc.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    raw = errors[0].get("input") if errors else None
    kind = BY_NAME[name].kind if name in BY_NAME else None
    if isinstance(kind, type) and issubclass(kind, Enum) and raw is not None:
        choices = [member.value for member in kind]
        hint = suggest(str(raw), choices)
        if name == "device" and str(raw).lower().startswith("gpu"):
            hint = "did you mean 'cuda'? (or --gpus N)"
        return Issue(
            label, f"{raw!r} is not one of {', '.join(choices)}", hint or f"Choose one of {', '.join(choices)}"
        )
    if raw is not None and errors and errors[0].get("type", "").startswith("int"):
        return Issue(label, f"expected a whole number, got {raw!r}", f"Give a number, e.g. {option} 2")
    message = " ".join(str(exc.message).split()).rstrip(".")
    return Issue(label, message, f"Run '{PROG} --help' for the accepted values")


def _wants_subcommand(args: list[str], subcommands: tuple[str, ...]) -> bool:
    """`islab-train doctor ...` etc. (also while the shell completes such a command line)."""
    if args and args[0] in subcommands:
        return True
    words = (os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS") or "").split()
    return len(words) > 1 and words[1] in subcommands


# `islab-train help [COMMAND]` is `islab-train [COMMAND] --help`; `--version`/`-V` prints one line.
HELP_WORD = "help"
VERSION_FLAGS = ("--version", "-V")
# What people type reaching for help or the version, besides the real spellings: told those.
HELP_LOOKALIKES = frozenset({"-help", "--usage", "-usage", "usage", "-?", "?"})
VERSION_LOOKALIKES = frozenset({"version", "-version", "--v"})


def mistyped_subcommand_issue(args: list[str]) -> Issue | None:
    """`islab-train doctr`: a bare first word close to a subcommand's name, or to ``help`` or
    ``version``, and the usual other spellings of those (``-help``, ``usage``, ``version``) -- the
    training command would read a bare word as a KEY=VALUE override and say that instead."""
    if not args or "=" in args[0] or args[0] in (*SUBCOMMANDS, HELP_WORD):
        return None
    word = args[0]
    if word in HELP_LOOKALIKES:
        hint = f"for help, run '{PROG} --help' (or '{PROG} help COMMAND')"
    elif word in VERSION_LOOKALIKES:
        hint = f"did you mean '{PROG} --version'?"
    elif word.startswith("-"):
        return None  # an option: click names it, with the closest ones
    else:
        hint = suggest(word, (*SUBCOMMANDS, HELP_WORD, "version")).replace("'version'", "'--version'")
    if not hint:
        return None
    return Issue(f"command {word!r}", f"{PROG} has no such command", f"{hint} (commands: {' | '.join(SUBCOMMANDS)})")


def version_line() -> str:
    """``islab-train 0.1.0 (Python 3.11.2; torch 2.13.0, rl-games 1.6.1, ...)``: this package and the
    versions of what it trains with (the doctor's list, read from the installed metadata: nothing
    imported), those not installed named at the end."""
    import importlib.metadata
    import platform

    from islab import __version__
    from islab.doctor.probes import VERSION_DISTRIBUTIONS

    found, missing = [], []
    for name in VERSION_DISTRIBUTIONS:
        if name == PROG:
            continue
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    absent = f"; not installed: {', '.join(missing)}" if missing else ""
    return f"{PROG} {__version__} (Python {platform.python_version()}; {', '.join(found)}{absent})"


def run(argv: list[str] | None = None) -> int:
    """Parse and execute; return the exit status (tests call this in-process)."""
    from typer._click import exceptions as click_exceptions  # typer vendors click

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [HELP_WORD]:  # help [COMMAND]
        args = [*(args[1:2] if args[1:2] and args[1] in SUBCOMMANDS else []), "--help"]
    head = args[: args.index("--")] if "--" in args else args
    if any(flag in head for flag in VERSION_FLAGS) and not _wants_subcommand(args, SUBCOMMANDS):
        print(version_line())
        return 0
    dash = lookalike_dash_issue(head)
    if dash is None:
        dash = mistyped_subcommand_issue(args)
    subcommand = _wants_subcommand(args, SUBCOMMANDS)
    if dash is None and not subcommand:  # the training command: Isaac Lab's spelling of its options
        islab_flags = {flag for option in OPTIONS for flag in option.flag.split("/")} | {"--help"}
        dash = isaaclab_spelling_issue(args[: args.index("--")] if "--" in args else args, islab_flags)
    if dash is not None:
        print(dash.message(), file=sys.stderr)
        return 2
    if "--" in args and (not subcommand or args[0] in SPEC_SUBCOMMANDS):
        # Everything after `--` belongs to the entry point, verbatim (click would read options there);
        # doctor and sbatch resolve the same spec as the training command, so they take it too.
        cut = args.index("--")
        args, spec_layers.ENTRY_ARGS = args[:cut], args[cut + 1 :]
    else:
        spec_layers.ENTRY_ARGS = None
    command = typer.main.get_command(commands if subcommand else app)
    # `--num-envs auto` (islab.fit.auto): taken off before parsing (the option is a number), applied after resolution
    args, spec_layers.NUM_ENVS_AUTO = take_auto(args) if not subcommand else (args, False)
    try:
        with environment_auto_taken() as from_environment:
            spec_layers.NUM_ENVS_AUTO = spec_layers.NUM_ENVS_AUTO or (from_environment and not subcommand)
            result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except typer.BadParameter as exc:
        print(_bad_parameter_issue(exc).message(), file=sys.stderr)
        return 2
    except click_exceptions.UsageError as exc:
        message = " ".join(exc.format_message().split()).rstrip(".")
        print(escape(f"error: {message}. Run '{PROG} --help' for the options."), file=sys.stderr)
        return 2
    except typer.Abort:
        return 130
    return result if isinstance(result, int) else 0


def main() -> None:
    # Everything islab-train started has ended by now: leave without the interpreter's teardown of
    # what it imported (~0.2 s after a training run, which imported matplotlib and rich).
    end(run())
