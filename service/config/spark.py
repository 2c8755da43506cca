"""The ``spark`` section: where Floe's Spark jobs run, and Spark's own settings passed through.

``master`` picks local mode (the default, one process) or a cluster
(``spark://`` standalone, ``k8s://``, ``yarn``). ``conf`` passes Spark's own
keys through as they are; the keys Floe sets itself from other fields are
refused there, with the field to use instead, so that one setting never has
two places.
"""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from service.config.fields import Properties, Section
from service.config.problems import Problem, raise_all

_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?"  # local, local[4], local[*], local[4,2] (with task retries)
    r"|spark://[^\s/]+(:\d+)?(,[^\s/]+(:\d+)?)*"  # standalone, with standby masters
    r"|k8s://https?://\S+|yarn"
)
# Spark keys that Floe sets from its own fields or owns outright.
_OWNED_KEYS = {
    "spark.master": "spark.master",
    "spark.driver.host": "spark.driver_host",
    "spark.driver.bindAddress": "spark.bind_address",
    "spark.jars": "the jar sets (deploy/pom.xml); add jars with spark.jars.packages",
    "spark.app.name": "(Floe names its jobs floe-ingest and floe-compact)",
}


class SparkConfig(Section):
    """The Spark session of `floe ingest`, and of `floe compact` with `compaction.executor: spark`."""

    master: str = Field(
        "local[*]",
        description="`local[*]`/`local[N]` (in-process, the default), `spark://host:7077` (standalone), "
        "`k8s://https://host:443` (executors as pods) or `yarn`.",
    )
    conf: Properties = Field(
        default_factory=dict,
        description="Spark settings passed through (`spark.executor.memory: 4g`, `spark.executor.cores`, "
        "`spark.dynamicAllocation.enabled`, `spark.kubernetes.*`); secrets among them are masked in logs.",
    )
    driver_host: str | None = Field(
        None,
        description="Host name or address executors use to reach the driver (`spark.driver.host`); "
        "`127.0.0.1` in local mode, else Spark's default (this host's name). On Kubernetes: the headless service.",
    )
    bind_address: str | None = Field(
        None,
        description="Address the driver listens on (`spark.driver.bindAddress`); `127.0.0.1` in local "
        "mode, else `driver_host`. `0.0.0.0` in a pod.",
    )
    ship_floe: bool = Field(
        False,
        description="Send Floe's own packages to the executors (as `spark.submit.pyFiles` would), for "
        "workers that have Floe's dependencies but not Floe; see docs/spark-clusters.md.",
    )

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @model_validator(mode="after")
    def _valid(self) -> SparkConfig:
        raise_all([*self._master_problems(), *self._conf_problems()])
        return self

    def _master_problems(self) -> list[Problem]:
        if _MASTER.fullmatch(self.master):
            return []
        return [
            (
                "master",
                f"expected local[*], local[N], spark://host:port, k8s://https://host:port or yarn, got {self.master!r}",
            )
        ]

    def _conf_problems(self) -> list[Problem]:
        problems = []
        for key in self.conf:
            if not key.startswith("spark."):
                problems.append((f"conf.{key}", "expected a Spark setting, whose name starts with 'spark.'"))
            elif key in _OWNED_KEYS:
                problems.append((f"conf.{key}", f"Floe sets it; use {_OWNED_KEYS[key]}"))
        return problems

    def session_settings(self) -> dict[str, str]:
        """The Spark settings of this section (Floe's base settings come from runtime.spark_session)."""
        settings = {**self.conf}
        if self.driver_host is not None:
            settings["spark.driver.host"] = self.driver_host
        if self.bind_address is not None:
            settings["spark.driver.bindAddress"] = self.bind_address
        return settings
