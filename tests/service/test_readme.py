"""The README's generated references match their sources."""

from service.docs import README, render


def test_readme_references_are_current():
    current = README.read_text()
    assert render(current) == current, "README.md is stale: run .venv/bin/python -m service.docs"
