"""The order test files are handed to pytest-xdist's workers: the longest first.

``make test`` runs each file whole on one worker (``--dist loadfile``). Handed out in collection order,
the suite's few long end-to-end files (one test of several minutes each) came last, and one worker ran
them alone while the others sat idle. Longest first (the LPT rule) lets the many short files fill the
gaps at the end. The seconds come from ``tests/file_seconds.json``, measured on a whole run; refresh it
with ``python -m tests.support.file_order JUNIT_XML > tests/file_seconds.json`` after a run with
``--junitxml``. A file it does not name goes first, as if it were long: a new end-to-end file must not
become the tail.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path
from typing import Protocol, Sequence

SECONDS_FILE = Path(__file__).resolve().parents[1] / "file_seconds.json"


class Item(Protocol):
    nodeid: str


def file_of(nodeid: str) -> str:
    """``tests/x/test_y.py::test_z[p]`` -> ``tests/x/test_y.py``."""
    return nodeid.split("::", 1)[0]


def longest_files_first(items: Sequence[Item], seconds: dict[str, float]) -> list[Item]:
    """``items`` grouped by file, files by measured seconds (descending), unknown files first; within a
    file, and between files of equal seconds, the collection order stays (every worker must agree)."""
    position: dict[str, int] = {}
    for index, item in enumerate(items):
        position.setdefault(file_of(item.nodeid), index)
    unknown = float("inf")

    def key(item: Item) -> tuple[float, int]:
        path = file_of(item.nodeid)
        return (-seconds.get(path, unknown), position[path])

    return sorted(items, key=key)


def measured_seconds() -> dict[str, float]:
    return json.loads(SECONDS_FILE.read_text()) if SECONDS_FILE.exists() else {}


def seconds_from_junit(junit_xml: Path) -> dict[str, float]:
    """Each test file's seconds (its tests' calls, set-ups and teardowns) in a pytest JUnit report."""
    totals: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        path = case.get("classname", "").split(".")
        module = [p for p in path if not p[:1].isupper()]  # drop a test class's name
        totals["/".join(module) + ".py"] += float(case.get("time", 0))
    return {path: round(total, 1) for path, total in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    json.dump(seconds_from_junit(Path(sys.argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
