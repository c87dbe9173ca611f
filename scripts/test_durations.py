"""Where the test suite's time goes: per folder and the slowest tests, from a pytest JUnit XML file.

    scripts/test.sh -q --junitxml=/tmp/suite.xml     # or ISLAB_TEST_JOB=main scripts/test.sh ...
    python scripts/test_durations.py /tmp/suite.xml  # per folder, then the 10 slowest tests
    python scripts/test_durations.py /tmp/suite.xml --top 25 --before /tmp/main.xml

``--before`` adds the same table for an earlier run (e.g. main's) and the difference, which is what
a new feature's note says it adds to the suite (docs/TESTING.md). A test's time is its setup, call
and teardown together, as JUnit records it.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path


def test_times(junit: Path) -> dict[str, float]:
    """``path::name`` -> seconds, for every test case of the file."""
    times: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        times[f"{path}.py::{case.get('name')}"] = times.get(f"{path}.py::{case.get('name')}", 0.0) + float(
            case.get("time") or 0.0
        )
    return times


def folder_of(test: str) -> str:
    """``tests/e2e/test_x.py::t`` -> ``e2e``; a test outside tests/ -> its top folder."""
    parts = test.split("::", 1)[0].split("/")
    return parts[1] if parts[0] == "tests" and len(parts) > 2 else parts[0]


def by_folder(times: dict[str, float]) -> dict[str, tuple[float, int]]:
    totals: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter[str] = collections.Counter()
    for test, seconds in times.items():
        totals[folder_of(test)] += seconds
        counts[folder_of(test)] += 1
    return {folder: (totals[folder], counts[folder]) for folder in totals}


def report(times: dict[str, float], before: dict[str, float] | None = None, top: int = 10) -> str:
    now = by_folder(times)
    then = by_folder(before) if before is not None else {}
    lines = [
        "| folder | tests | seconds |" + (" before | change |" if before is not None else ""),
        "|---|---|---|" + ("---|---|" if before is not None else ""),
    ]
    for folder, (seconds, count) in sorted(now.items(), key=lambda item: -item[1][0]):
        row = f"| {folder} | {count} | {seconds:.0f} |"
        if before is not None:
            earlier = then.get(folder, (0.0, 0))[0]
            row += f" {earlier:.0f} | {seconds - earlier:+.0f} |"
        lines.append(row)
    total = sum(times.values())
    row = f"| **all** | {len(times)} | **{total:.0f}** |"
    if before is not None:
        row += f" {sum(before.values()):.0f} | {total - sum(before.values()):+.0f} |"
    lines += [row, "", f"The {top} slowest tests:", ""]
    for test, seconds in sorted(times.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"- {seconds:.1f} s `{test}`")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="pytest's --junitxml file")
    parser.add_argument("--before", type=Path, help="an earlier run's --junitxml file, to compare with")
    parser.add_argument("--top", type=int, default=10, help="how many of the slowest tests to list (default 10)")
    args = parser.parse_args(argv)
    before = test_times(args.before) if args.before else None
    print(report(test_times(args.junit), before, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
