"""Text that reaches the terminal: one home for making user values safe to print.

The text ``--dry-run`` is meant to be pasted into a shell, so every printed line must be either a
``#`` comment or the quoted command. A value that carries a line break (``\\n``, ``\\r``, but also
``\\x0b \\x0c \\x1c-\\x1e \\x85 \\u2028 \\u2029``, which ``str.splitlines`` and some terminals treat
as one) or an escape sequence (ESC, other C0/C1 controls) could end a comment early or repaint the
screen. Values are refused where they enter (:func:`unsafe_character` in the spec's validators) where no
legitimate value holds such a character; as a second line of defence every comment is rendered
through :func:`comment`. The one kind of value that may hold them is an argument of the user's own
entry point (after ``--``: a ``python -c`` snippet, a multi-line prompt): commands are rendered
through :func:`shell_join`, which writes such a word in bash's ``$'...'`` quoting, so a printed
command is always exactly one line.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Iterable

# Characters Python's str.splitlines breaks on besides \n and \r: shells do not, but terminals,
# editors and copy-paste paths may, and none of them belongs in a value anyway.
_LINE_SEPARATORS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def unsafe_character(text: str) -> str | None:
    """The first character of ``text`` that must not reach printed text (a line separator or a
    control/format character such as ESC), as ``repr`` shows it; ``None`` when it is clean."""
    for ch in text:
        if ch in _LINE_SEPARATORS or unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp"}:
            return repr(ch)
    return None


def escape(text: str) -> str:
    """``text`` with every unsafe character written as its Python escape (``\\n``, ``\\x1b``)."""
    return "".join(repr(ch)[1:-1] if unsafe_character(ch) else ch for ch in text)


def comment(text: str) -> str:
    """One shell comment line: ``# `` + ``text`` with unsafe characters escaped, so it cannot
    end early whatever a value inside it holds."""
    return "# " + escape(text)


def shell_quote(word: str) -> str:
    """``word`` quoted for bash on one line: ``shlex.quote`` when it is printable, else ANSI-C
    quoting (``$'a\\ntouch'``) with every unsafe character, backslash and quote escaped, which bash
    turns back into exactly ``word``."""
    if unsafe_character(word) is None:
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(ch) for ch in word) + "'"


def _ansi_c(ch: str) -> str:
    if ch in "\\'":
        return "\\" + ch
    if not unsafe_character(ch):
        return ch
    # Byte escapes of the UTF-8 encoding: bash's \u depends on the locale, \xHH does not.
    return "".join(f"\\x{byte:02x}" for byte in ch.encode("utf-8"))


def shell_join(words: Iterable[str]) -> str:
    """``shlex.join`` that keeps the command on one printed line (see :func:`shell_quote`)."""
    return " ".join(shell_quote(word) for word in words)
