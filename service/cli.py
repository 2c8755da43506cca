"""The ``floe`` command line.

Exit codes: 0 success, 1 a command failed, 2 bad usage or an invalid
configuration (each problem printed on its own line), 3 stopped by SIGTERM
or SIGINT (``ingest``, ``compact``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def _load(path: str):  # -> FloeConfig
    from service.config import load_config

    return load_config(path)


def _catalog_from(args: argparse.Namespace):  # -> Catalog
    from commit.catalog import Catalog

    if args.config:
        config = _load(args.config)
        return Catalog(config.catalog.connection_uri(), config.catalog.warehouse, config.catalog.name)
    if not (args.catalog_uri and args.warehouse):
        raise SystemExit("floe table: give --config FILE, or --catalog-uri and --warehouse")
    return Catalog(args.catalog_uri, args.warehouse, args.catalog_name)


def _print(lines: Sequence[str]) -> int:
    for line in lines:
        print(line)
    return EXIT_OK


def _table(args: argparse.Namespace) -> int:
    from service import inspect
    from table.io import FileIO

    catalog = _catalog_from(args)
    if args.table_command == "list":
        return _print(inspect.list_tables(catalog))
    loaded = catalog.load_table(args.identifier)
    io = FileIO.for_location(loaded.metadata_location)
    views: dict[str, Callable[[], list[str]]] = {
        "describe": lambda: inspect.describe(loaded.metadata_location, loaded.metadata),
        "history": lambda: inspect.history(loaded.metadata),
        "files": lambda: inspect.files(io, loaded.metadata),
        "scan": lambda: inspect.scan(io, loaded.metadata, args.limit, tuple(args.columns or ("*",))),
    }
    return _print(views[args.table_command]())


def _check(args: argparse.Namespace) -> int:
    import yaml

    from service.check import run_checks
    from service.config import redacted_dict

    config = _load(args.config)
    print("configuration: valid")
    if args.show_config:
        print(yaml.safe_dump(redacted_dict(config), sort_keys=False).rstrip())
    results = run_checks(config)
    _print([r.line() for r in results])
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _compact(args: argparse.Namespace) -> int:
    import threading

    from runtime.signals import install_stop_signals
    from service.compact_command import run_compactor

    config = _load(args.config)
    stop = threading.Event()
    install_stop_signals(stop, logging.getLogger("floe.compact"))
    return run_compactor(config, once=args.once, stop=stop)


def _ingest(args: argparse.Namespace) -> int:
    import threading

    from runtime.logging import configure_logging
    from runtime.signals import install_stop_signals
    from service.ingest_command import run_ingest_service

    config = _load(args.config)
    configure_logging(config.log_level, sys.stderr)
    stop = threading.Event()
    install_stop_signals(stop, logging.getLogger("floe.ingest"))
    return run_ingest_service(config, stop=stop)


def _demo(args: argparse.Namespace) -> int:
    from service.demo import DemoOptions, run_demo

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="floe-demo-"))
    return run_demo(DemoOptions(work_dir=work, duration_s=args.duration, rate=args.rate))


def _add_table_commands(commands: argparse._SubParsersAction) -> None:
    table = commands.add_parser("table", help="inspect a table: list, describe, history, files, scan")
    table.add_argument("--config", help="Floe configuration file (for the catalog)")
    table.add_argument("--catalog-uri", help="catalog URI, instead of --config (sqlite:////abs/catalog.db)")
    table.add_argument("--warehouse", help="warehouse location, with --catalog-uri")
    table.add_argument("--catalog-name", default="floe", help="catalog name, with --catalog-uri (default floe)")
    sub = table.add_subparsers(dest="table_command", required=True)
    sub.add_parser("list", help="every table in the catalog")
    for name, text in (
        ("describe", "schema, partition specs, sort order, properties"),
        ("history", "snapshots of the main branch with their summaries"),
        ("files", "live data files with sizes, rows and delete counts"),
        ("scan", "live rows as JSON lines (deletes applied)"),
    ):
        view = sub.add_parser(name, help=text)
        view.add_argument("identifier", help="namespace.table")
        if name == "scan":
            view.add_argument("--limit", type=int, default=20, help="rows to print at most (default 20)")
            view.add_argument("--columns", nargs="*", help="columns to print (default all)")
    table.set_defaults(func=_table)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe", description="Land Kafka topics in Apache Iceberg v2 tables.")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="validate a configuration and reach Kafka, the catalog, the warehouse")
    check.add_argument("--config", required=True, help="Floe configuration file (YAML)")
    check.add_argument("--show-config", action="store_true", help="print the effective configuration, secrets masked")
    check.set_defaults(func=_check)

    ingest = commands.add_parser("ingest", help="run the streaming job: one query per table, until stopped")
    ingest.add_argument("--config", required=True, help="Floe configuration file (YAML)")
    ingest.set_defaults(func=_ingest)

    compact = commands.add_parser("compact", help="run the compactor: hourly by default, or one round with --once")
    compact.add_argument("--config", required=True, help="Floe configuration file (YAML)")
    compact.add_argument("--once", action="store_true", help="compact every table once, then exit")
    compact.set_defaults(func=_compact)

    _add_table_commands(commands)

    demo = commands.add_parser("demo", help="run Floe on embedded defaults (local Kafka, SQLite catalog)")
    demo.add_argument("--work-dir", help="where the demo keeps its broker, catalog and warehouse (default: a new temp dir)")
    demo.add_argument("--duration", type=float, default=60.0, help="seconds of order events to produce (default 60)")
    demo.add_argument("--rate", type=int, default=200, help="order events per second (default 200)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from runtime.logging import configure_logging
    from service.config import ConfigError

    configure_logging("INFO", sys.stderr)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"floe: invalid configuration ({exc.source}):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
