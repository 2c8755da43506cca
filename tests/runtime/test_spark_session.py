"""runtime/spark_session.py: what a Floe session is given beyond its settings."""

from __future__ import annotations


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
    assert "table/io.py" in names and "ingest/batch.py" in names and not any("__pycache__" in n for n in names)
