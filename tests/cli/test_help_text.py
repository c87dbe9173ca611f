"""Every option's help text reaches ``--help`` intact: help is Rich markup, so text such as
``[rank R]`` would otherwise be eaten as a style tag (issue 14 item 9)."""

from __future__ import annotations

import re

import pytest
import typer
from paths import DOCS

from islab.cli.app import SUBCOMMANDS, app
from islab.cli.commands import commands


def _words(text: str) -> str:
    # Rich wraps lines and draws panel borders; compare the words only.
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _commands() -> list[tuple[list[str], object]]:
    main = typer.main.get_command(app)
    group = typer.main.get_command(commands)
    found = [([], main)]
    for name in SUBCOMMANDS:
        found.append(([name], group.commands[name]))  # type: ignore[attr-defined]
    return found


@pytest.mark.parametrize("argv, command", _commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_help_string_appears_intact(islab, monkeypatch, argv, command):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = islab(*argv, "--help")
    assert code == 0, err
    shown = _words(out)
    checked = 0
    for param in command.params:
        text = getattr(param, "help", None)
        if not text or param.name == "help":
            continue
        # What the user should read: the help string as written, markup escapes removed.
        expected = _words(text.replace("\\[", "["))
        assert expected in shown, f"{param.name}: {expected!r} not in --help"
        checked += 1
    assert checked > 0
    if not argv:
        assert "prefixed [rank R] (default" in shown  # the examples epilog


def test_every_option_has_a_row_in_docs_cli_md():
    """docs/CLI.md is the reference: an option added to the table without a row there fails here."""

    from islab.cli.options import OPTIONS

    reference = (DOCS / "CLI.md").read_text(encoding="utf-8")
    rows = [line for line in reference.splitlines() if line.startswith("| `")]
    missing = [o.flag for o in OPTIONS if not any(row.startswith(f"| `{o.flag}") for row in rows)]
    assert not missing, f"options without a row in docs/CLI.md: {missing}"
