"""Fixtures of the table/ tests: the interop corpus, built once per session."""

from __future__ import annotations

from typing import Callable

import pytest

from tests.support.interop_tables import SCENARIOS, Scenario


@pytest.fixture(scope="session")
def interop_corpus(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Scenario]:
    """Builds a scenario of ``tests/support/interop_tables.py`` on first use."""
    root = tmp_path_factory.mktemp("interop")
    built: dict[str, Scenario] = {}

    def get(name: str) -> Scenario:
        if name not in built:
            built[name] = SCENARIOS[name](root)
        return built[name]

    return get
