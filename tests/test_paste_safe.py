"""The text dry run is pasted into shells: hostile values must never produce a line that is not a
comment or the quoted command (issue 14 item 1). Every field that reaches the printed text is fed
every kind of line separator and an ANSI escape; the output is then parsed back line by line."""

from __future__ import annotations

import shlex

import pytest
import yaml

from islab.launcher.text import comment, unsafe_character

HOSTILE = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x1b[31m", "\x00"]
PAYLOAD = "touch /tmp/pwned #"


def _lines(text: str) -> list[str]:
    # str.splitlines breaks on every separator above, i.e. the strictest reader of the output.
    return text.splitlines()


def assert_paste_safe(code: int, out: str, err: str) -> None:
    if code == 2:
        assert out == ""
        lines = _lines(err.strip())
        assert len(lines) == 1 and lines[0].startswith("error: "), err
    else:
        assert code == 0, err
    for line in _lines(out):
        assert unsafe_character(line) is None, repr(line)
        if not line.startswith("#"):
            argv = shlex.split(line)  # one complete quoted command per line
            assert argv, repr(line)
    assert unsafe_character(err.replace("\n", "")) is None, repr(err)


def _fields(tmp_path, bad: str) -> dict[str, list[str]]:
    """Each way a value reaches the text dry run -> the argv that carries ``bad`` there."""
    base = ["--lib", "rsl_rl", "--device", "cpu", "--nproc", "2", "--dry-run"]
    env_file = tmp_path / "env.yaml"
    env_file.write_text(yaml.safe_dump({"device": "cpu", "env": {"NCCL_DEBUG": f"INFO{bad}{PAYLOAD}"}}))
    # No file name can hold NUL: that case uses an ordinary name.
    named = tmp_path / f"c{bad.replace(chr(0), '')}{PAYLOAD.replace('/', '')}.yaml"
    named.write_text(yaml.safe_dump({"device": "cpu"}))
    return {
        "override": [*base, f"algorithm.class_name=PPO{bad}{PAYLOAD}"],
        "env value": [*base, "--cluster", str(env_file)],
        "cluster path": [*base, "--cluster", str(named)],
        "run name": [*base, "--run-name", f"x{bad}{PAYLOAD}"],
        "log dir": [*base, "--log-dir", f"logs{bad}{PAYLOAD}"],
        "python": [*base, "--python", f"python{bad}{PAYLOAD}"],
        "task": [*base, "--task", f"Islab-Cartpole-v0{bad}{PAYLOAD}"],
        "task module": [*base, "--task-module", f"x{bad}{PAYLOAD}"],
        "resume": [*base, "--resume", f"runs{bad}{PAYLOAD}"],
        "coordinator": ["--lib", "skrl", "--ml-framework", "jax", "--device", "cpu", "--dry-run",
                        "--coordinator-address", f"127.0.0.1:5000{bad}{PAYLOAD}"],
    }  # fmt: skip


@pytest.mark.parametrize("bad", HOSTILE, ids=[repr(ch) for ch in HOSTILE])
def test_hostile_values_cannot_escape_the_comment_block(islab, tmp_path, bad):
    for field, argv in _fields(tmp_path, bad).items():
        code, out, err = islab(*argv)
        try:
            assert_paste_safe(code, out, err)
        except AssertionError as failure:
            raise AssertionError(f"{field}: {failure}") from None


def test_comment_renders_every_separator_as_an_escape():
    rendered = comment("a" + "".join(HOSTILE) + "b")
    assert _lines(rendered) == [rendered]
    assert rendered.startswith("# a") and rendered.endswith("b")
    assert "\\n" in rendered and "\\u2028" in rendered and "\\x1b" in rendered
