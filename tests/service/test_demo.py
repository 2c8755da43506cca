"""`floe demo` in a short mode: its printed summary matches the table it leaves behind.

The table is read back twice, independently of the demo's own code: with the
`floe table` command the demo tells the user to run, and with TableScan.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from commit.catalog.sql.catalog import SqlCatalog
from table.io import FileIO
from table.scan import TableScan

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
FLOE = [sys.executable, "-m", "service.cli"]


def summary_value(output: str, label: str) -> str:
    match = re.search(rf"^  {re.escape(label)}:\s+(.+)$", output, re.M)
    assert match, f"no {label!r} line in the summary:\n{output}"
    return match[1]


def test_demo_summary_matches_the_table(tmp_path):
    work = tmp_path / "demo"
    result = subprocess.run([*FLOE, "demo", "--work-dir", str(work), "--duration", "15", "--rate", "100"],
                            capture_output=True, text=True, timeout=420)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout

    produced = int(summary_value(out, "events produced"))
    rows = int(summary_value(out, "rows in shop.orders"))
    before, after = map(int, re.fullmatch(r"(\d+) before compaction, (\d+) after",
                                          summary_value(out, "snapshots")).groups())
    assert produced >= 1_000 and int(summary_value(out, "records landed")) == produced
    assert summary_value(out, "consumer lag") == "0 records"
    assert summary_value(out, "compaction").startswith("success")

    uri, warehouse = f"sqlite:///{work / 'catalog.db'}", str(work / "warehouse")
    with SqlCatalog(uri, warehouse) as catalog:
        loaded = catalog.load_table("shop.orders")
    table = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()
    assert table.num_rows == rows > 0
    assert len(loaded.metadata.snapshots) == after and after >= before >= 1
    assert len(set(table.column("order_id").to_pylist())) == rows, "one row per order"
    assert set(table.column("status").to_pylist()) <= {"placed", "paid", "shipped", "delivered"}

    hints = printed_hints(out)
    assert [label for label, _ in hints] == [
        "the rows, with Floe", "the history, with Floe", "with pyiceberg", "with Spark SQL and Iceberg's runtime"]
    results = {label: subprocess.run(command, shell=True, cwd="/", capture_output=True, text=True, timeout=300)
               for label, command in hints}  # verbatim, from a directory that is not the repository
    for label, done in results.items():
        assert done.returncode == 0, f"{label}: {hints}\n{done.stderr[-3000:]}"
    assert len(results["the rows, with Floe"].stdout.splitlines()) == min(5, rows)
    assert len(results["the history, with Floe"].stdout.splitlines()) == after
    counted = dict(line.split("\t") for line in results["with Spark SQL and Iceberg's runtime"].stdout.splitlines())
    assert sum(int(n) for n in counted.values()) == rows, "Iceberg Java reads every row Floe reads"
    assert "order_id_count" in results["with pyiceberg"].stdout
    assert f"rm -rf {work}" in out, "the demo says where its files are and how to remove them"


def printed_hints(out: str) -> list[tuple[str, str]]:
    """The (label, command) pairs the demo prints under 'query the table'."""
    section = out.split("floe demo: query the table", 1)[1].splitlines()[1:]
    hints = []
    for label, command in zip(section[0::2], section[1::2]):
        if not label.startswith("  ") or not command.startswith("    "):
            break
        hints.append((label.strip().rstrip(":"), command.strip()))
    return hints


def test_the_removal_command_spares_what_was_there_before(tmp_path):
    from service.demo import removal_command

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "kafka").mkdir()
    assert removal_command(fresh, frozenset()) == f"rm -rf {fresh}"
    mine = tmp_path / "my projects"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    before = frozenset(entry.name for entry in mine.iterdir())
    (mine / "kafka").mkdir()
    (mine / "catalog.db").write_text("")
    assert removal_command(mine, before) == f"rm -rf '{mine}/catalog.db' '{mine}/kafka'"

