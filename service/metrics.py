"""The service's own metrics (docs/metrics.md, "Service"): build info and liveness per component.

``floe_build_info{version}`` lets dashboards show which release runs, and
``floe_up{component}`` tells a scrape that reached the process whether the
``ingest`` or ``compact`` component inside it is running (a process can serve
``/metrics`` while its component has stopped).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Literal

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

Component = Literal["ingest", "compact"]
COMPONENTS: tuple[Component, ...] = ("ingest", "compact")


def floe_version() -> str:
    """The installed distribution's version, or ``unknown`` when run from a bare source tree."""
    try:
        return metadata.version("floe")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class ServiceMetrics:
    """The service metrics registered on one registry."""

    build_info: Gauge
    up: Gauge

    def mark_up(self, component: Component) -> None:
        """``floe_up{component}`` = 1: the component has started its work."""
        self.up.labels(component=_checked(component)).set(1)

    def mark_down(self, component: Component) -> None:
        """``floe_up{component}`` = 0: the component stopped (cleanly or not)."""
        self.up.labels(component=_checked(component)).set(0)


def _checked(component: str) -> str:
    if component not in COMPONENTS:
        raise ValueError(f"component: expected one of {', '.join(COMPONENTS)}, got {component!r}")
    return component


def register_service_metrics(registry: CollectorRegistry = REGISTRY, version: str | None = None) -> ServiceMetrics:
    """Create the service metrics on ``registry``; ``floe_build_info`` is set to 1 at once."""
    build_info = Gauge("floe_build_info", "Floe build information; always 1.", ["version"], registry=registry)
    build_info.labels(version=version or floe_version()).set(1)
    up = Gauge("floe_up", "1 while the ingest or compact component runs.", ["component"], registry=registry)
    return ServiceMetrics(build_info=build_info, up=up)
