"""The suite hands its longest files to the workers first (tests/support/file_order.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.support.file_order import longest_files_first, seconds_from_junit


@dataclasses.dataclass
class Item:
    nodeid: str


def test_files_go_longest_first_unknown_ones_before_them_and_each_file_stays_whole_and_in_order():
    items = [Item(n) for n in ("tests/a.py::one", "tests/b.py::one", "tests/a.py::two", "tests/c.py::one",
                               "tests/new.py::one", "tests/d.py::one")]
    seconds = {"tests/a.py": 1.0, "tests/b.py": 300.0, "tests/c.py": 20.0, "tests/d.py": 20.0}
    ordered = [i.nodeid for i in longest_files_first(items, seconds)]
    assert ordered == ["tests/new.py::one", "tests/b.py::one", "tests/c.py::one", "tests/d.py::one",
                       "tests/a.py::one", "tests/a.py::two"]


def test_a_junit_report_sums_each_files_tests_classes_included(tmp_path: Path):
    report = tmp_path / "junit.xml"
    report.write_text("""<testsuites><testsuite>
        <testcase classname="tests.faults.test_kafka" name="test_a" time="200.5"/>
        <testcase classname="tests.table.test_schema.TestSchema" name="test_b" time="1.25"/>
        <testcase classname="tests.table.test_schema" name="test_c" time="0.25"/>
    </testsuite></testsuites>""")
    assert seconds_from_junit(report) == {"tests/faults/test_kafka.py": 200.5, "tests/table/test_schema.py": 1.5}
