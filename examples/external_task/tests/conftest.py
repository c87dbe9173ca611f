"""Run these tests from a checkout without installing the example: its package root joins the path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
