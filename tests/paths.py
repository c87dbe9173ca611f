"""Where things are, for every test folder: one definition instead of ``Path(__file__).parents[N]``
counted by hand in each file."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SRC = REPO / "src"
DOCS = REPO / "docs"
FIXTURES = TESTS / "fixtures"
