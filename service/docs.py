"""Keeps the README's generated blocks in step with their sources.

The configuration reference comes from the pydantic model and the metrics
reference from ``docs/metrics.md``. ``python -m service.docs`` rewrites
README.md; a test fails when the committed README is stale.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from service.config import render_config_reference

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
METRICS = ROOT / "docs" / "metrics.md"


def _metrics_reference() -> str:
    text = METRICS.read_text()
    return text[text.index("## Ingest") :].replace("## ", "### ").strip()


BLOCKS = {"config-reference": render_config_reference, "metrics-reference": _metrics_reference}


def render(readme: str) -> str:
    """``readme`` with every generated block replaced by its current content."""
    for name, produce in BLOCKS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.DOTALL)
        if not pattern.search(readme):
            raise ValueError(f"README.md has no '<!-- {name}:start -->' ... '<!-- {name}:end -->' block")
        readme = pattern.sub(_between_markers(produce().strip()), readme)
    return readme


def _between_markers(content: str) -> Callable[[re.Match[str]], str]:
    """A replacement that keeps a block's start and end markers around ``content``."""
    return lambda m: m.group(1) + content + "\n" + m.group(2)


def main() -> None:
    README.write_text(render(README.read_text()))
    print(f"updated {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
