"""runtime/spark_session.py: what a Floe session is given beyond its settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_ship_floe_packages_zips_floe_source_for_the_executors() -> None:
    import zipfile

    from runtime.spark_session import FLOE_PACKAGES, ship_floe_packages

    class Context:
        added: list[str] = []

        def addPyFile(self, path: str) -> None:  # noqa: N802 - SparkContext's name
            self.added.append(path)

    class Session:
        sparkContext = Context()

    archive = ship_floe_packages(Session())
    assert Session.sparkContext.added == [str(archive)]
    names = zipfile.ZipFile(archive).namelist()
    assert {name.split("/")[0] for name in names} == set(FLOE_PACKAGES)
    assert "table/io.py" in names and "ingest/driver/batch.py" in names and not any("__pycache__" in n for n in names)


@pytest.mark.spark
def test_executors_that_cannot_import_floe_stop_the_start_with_what_to_do(spark) -> None:
    """Executors whose Python cannot run Floe (the interpreter this venv was made from: pyspark's
    worker code comes from Spark, Floe's dependencies do not) fail the check with one line naming
    the missing module. (In local mode the worker's directory is the driver's, so Floe's own
    packages are found there; their dependencies are not.)"""
    from runtime.spark_session import ExecutorSetupError, verify_executors

    base_python = str(Path(sys.base_prefix) / "bin" / "python3")
    assert subprocess.run([base_python, "-c", "import pyarrow"], capture_output=True).returncode != 0
    context = spark.sparkContext
    saved, context.pythonExec = context.pythonExec, base_python
    try:
        with pytest.raises(ExecutorSetupError) as refused:
            verify_executors(spark)
    finally:
        context.pythonExec = saved
    message = str(refused.value)
    assert "\n" not in message and "No module named 'pyarrow'" in message
    assert "Floe image as the executor image" in message and "spark.ship_floe: true" in message
    assert verify_executors(spark)  # the venv's own Python can: the hosts that ran the probe
    assert not list(context.getJobTags()) and context.getLocalProperty("spark.jobGroup.id") in (None, ""), \
        f"the check leaves the caller's jobs as they were: {context.getLocalProperty('spark.jobGroup.id')!r}"
