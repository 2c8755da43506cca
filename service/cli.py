"""The ``floe`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence


def _demo(args: argparse.Namespace) -> int:
    """Embedded-defaults run. Ingestion is not built yet; this proves the set-up."""
    from service.local_kafka import LocalKafka

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="floe-demo-"))
    with LocalKafka(work / "kafka") as kafka:
        print(f"floe demo: local Kafka broker is up at {kafka.bootstrap} (logs: {kafka.log_file})")
        print(
            "floe demo: ingestion (Kafka -> Iceberg) is not implemented yet; "
            "this command will run it once the ingest and service work lands."
        )
    print("floe demo: local Kafka broker stopped")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe", description="Land Kafka topics in Apache Iceberg v2 tables.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run Floe on embedded defaults (local Kafka, SQLite catalog)")
    demo.add_argument("--work-dir", help="where the demo keeps its broker, catalog and warehouse")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
