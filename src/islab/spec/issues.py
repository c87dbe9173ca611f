"""What the user reads when something is wrong: one line per problem, and no secrets.

Every mistake a user can fix is an :class:`Issue` -- ``error: <field>: <what is wrong>. <fix>.`` --
and a :class:`SpecError` carries one or more of them to the command line, which prints them and
exits 2 with nothing started. :func:`mask_env` hides secret-looking values wherever an
environment is printed (the dry run, ``launch.yaml``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic_core import PydanticCustomError

from islab.spec.text import escape

SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
SECRET_MASK = "****"


@dataclass(frozen=True)
class Issue:
    """One problem with the spec: which field, what is wrong, how to fix it."""

    field: str
    problem: str
    fix: str

    def message(self) -> str:
        fix = self.fix if self.fix.endswith(("?", "!", ".")) else f"{self.fix}."
        # Values quoted in the problem may hold line breaks or escape codes: one line, always.
        return escape(f"error: {self.field}: {self.problem.rstrip('.')}. {fix}")


class SpecError(Exception):
    """The spec cannot be used; ``issues`` holds one human message per problem."""

    def __init__(self, issues: list[Issue] | Issue):
        self.issues = tuple(issues) if isinstance(issues, list) else (issues,)
        super().__init__("\n".join(issue.message() for issue in self.issues))


def suggest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    """ "did you mean 'x'?" for the closest candidate, or an empty string."""
    lowered = {c.lower(): c for c in candidates}
    matches = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return f"did you mean '{lowered[matches[0]]}'?" if matches else ""


def install_extra_hint(extra: str) -> str:
    """How to install an extra: from the islab-train checkout, as the README's install lines (the
    package is not on an index), with the user's torch pinned so the extra's dependencies cannot
    replace the build that matches their CUDA."""
    return (
        f"Install it from the islab-train checkout with your torch pinned: echo \"torch==$(python -c 'import torch; "
        f'print(torch.__version__)\')" > torch-pin.txt && python -m pip install -c torch-pin.txt -e ".[{extra}]"'
    )


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` fit for printing: secret-looking values replaced by ``****``."""
    return {name: (SECRET_MASK if is_secret_name(name) else value) for name, value in env.items()}


def rule(field_name: str, problem: str, fix: str, *, given_by: str | None = None) -> PydanticCustomError:
    """A validation failure that already speaks human: field, problem and fix travel in ctx.
    ``given_by`` names another field whose origin (``--max-iterations``, ``cpu.yaml: ...``) the
    message should add, since only :func:`islab.resolve.resolve.resolve_spec` knows where values came from."""
    ctx = {"field": field_name, "problem": problem, "fix": fix}
    if given_by is not None:
        ctx["given_by"] = given_by
    return PydanticCustomError("spec_rule", "{problem}", ctx)
