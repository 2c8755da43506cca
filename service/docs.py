"""Keeps the README's generated blocks in step with their sources.

The configuration reference comes from the pydantic model and the metrics
reference from ``docs/metrics.md``. ``python -m service.docs`` rewrites
README.md; a test fails when the committed README is stale.
"""

from __future__ import annotations

import re
import sys
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
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(readme):
            raise ValueError(f"README.md has no '<!-- {name}:start -->' ... '<!-- {name}:end -->' block")
        readme = pattern.sub(lambda m: m.group(1) + produce().strip() + "\n" + m.group(2), readme)
    return readme


def main() -> None:
    README.write_text(render(README.read_text()))
    print(f"updated {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
