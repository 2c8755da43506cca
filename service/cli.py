"""The ``floe`` command line.

Exit codes: 0 success, 1 a command failed (or ``check``/``index check``
found problems), 2 bad usage or an invalid configuration (each problem
printed on its own line), 3 stopped by SIGTERM or SIGINT (``ingest``,
``compact``).

A failure is printed as one line, ``floe <command>: <cause>; <what to do>``
(:mod:`service.failures`); the traceback only with ``log_level: DEBUG`` in the
configuration, or ``FLOE_LOG_LEVEL=DEBUG``. Output cut short by its reader
(``floe check --show-config | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_STOPPED = 0, 1, 2, 3
EXIT_CLOSED_PIPE = 128 + 13  # as a process killed by SIGPIPE: the reader of the output went away
LOG_LEVEL_ENV, LOG_FORMAT_ENV = "FLOE_LOG_LEVEL", "FLOE_LOG_FORMAT"


def _load(path: str):  # -> FloeConfig
    """The configuration, its object-store settings applied to this process (every command reads files)."""
    from service.config import load_config
    from service.spark_setup import apply_storage

    config = load_config(path)
    apply_storage(config)
    return config


def _configure_logging(config: Any = None) -> None:
    """The configuration's log level and format; without one, ``FLOE_LOG_LEVEL``/``FLOE_LOG_FORMAT``."""
    from runtime.logging import configure_logging

    if config is not None:
        configure_logging(config.log_level, sys.stderr, config.log_format)
    else:
        configure_logging(os.environ.get(LOG_LEVEL_ENV, "INFO"), sys.stderr, os.environ.get(LOG_FORMAT_ENV, "auto"))


def _catalog_from(args: argparse.Namespace):  # -> Catalog
    """The catalog to inspect; it must exist (inspection never creates one)."""
    from commit.catalog import open_catalog
    from commit.catalog.sql.catalog import DEFAULT_CATALOG_NAME

    config_file, uri, warehouse = (getattr(args, name, None) for name in ("config", "catalog_uri", "warehouse"))
    if config_file:
        config = _load(config_file)
        _configure_logging(config)
        from service.jobs import catalog_spec

        return catalog_spec(config).open(create=False)
    if not (uri and warehouse):
        raise UsageError("give --config FILE, or --catalog-uri and --warehouse")
    return open_catalog(uri, warehouse, getattr(args, "catalog_name", DEFAULT_CATALOG_NAME), create=False)


class UsageError(Exception):
    """The command line itself is wrong (exit 2)."""


def _print(lines: Sequence[str]) -> int:
    for line in lines:
        print(line)
    return EXIT_OK


def _table(args: argparse.Namespace) -> int:
    from service import inspect

    catalog = _catalog_from(args)
    if args.table_command == "list":
        return _print(inspect.list_tables(catalog))
    if args.table_command == "upgrade":
        return _upgrade(catalog, args.identifier, args.format_version)
    if args.table_command == "rewrite-position-deletes":
        return _rewrite_position_deletes(catalog, args.identifier)
    loaded = catalog.load_table(args.identifier)
    io = loaded.io
    views: dict[str, Callable[[], list[str]]] = {
        "describe": lambda: inspect.describe(loaded.metadata_location, loaded.metadata),
        "history": lambda: inspect.history(loaded.metadata),
        "files": lambda: inspect.files(io, loaded.metadata),
        "scan": lambda: inspect.scan(io, loaded.metadata, args.limit, _known_columns(args, loaded.metadata)),
    }
    return _print(views[args.table_command]())


def _upgrade(catalog: Any, identifier: str, version: int) -> int:
    """``floe table upgrade``: one metadata commit; existing files stay valid (spec Appendix E)."""
    from commit.format_upgrade import upgrade_format_version

    before = catalog.load_table(identifier).metadata.format_version
    after = upgrade_format_version(catalog, identifier, version)
    if before == after.format_version:
        return _print([f"table {identifier} is already at format version {before}"])
    return _print(
        [
            f"upgraded table {identifier} from format version {before} to {after.format_version} "
            f"(next-row-id {after.next_row_id}); its position delete files stay valid until compaction"
        ]
    )


def _rewrite_position_deletes(catalog: Any, identifier: str) -> int:
    """``floe table rewrite-position-deletes``: fold a v3 table's position delete files into DVs."""
    from compaction.maintenance.position_deletes_to_vectors import rewrite_position_deletes

    result = rewrite_position_deletes(catalog, identifier)
    if result.snapshot_id is None:
        return _print([f"table {identifier} has no position delete files to rewrite"])
    return _print(
        [
            f"wrote {result.vectors} deletion vectors; removed {result.removed_position_deletes} position "
            f"delete files, kept {result.kept_position_deletes} (they name data files without a DV); "
            f"snapshot {result.snapshot_id}"
        ]
    )


def _known_columns(args: argparse.Namespace, metadata: Any) -> tuple[str, ...]:
    """The ``--columns`` asked for, each checked against the table's schema."""
    from table.errors import SchemaError

    columns, schema = _columns(args.columns), metadata.schema()
    for column in (c for c in columns if c != "*"):
        try:
            schema.select(column)
        except SchemaError:
            top = ", ".join(f.name for f in schema.fields)
            raise UsageError(f"table {args.identifier} has no column {column!r}; its columns are: {top}") from None
    return columns


def _columns(given: list[str] | None) -> tuple[str, ...]:
    """``--columns a,b`` (or repeated): the column names; all when none are given."""
    names = [name.strip() for value in given or () for name in value.split(",") if name.strip()]
    return tuple(names) or ("*",)


def _index(args: argparse.Namespace) -> int:
    """``floe index check`` prints the comparison (exit 1 when it found problems); ``rebuild`` what it built."""
    from service.index_command import check_index, rebuild_index

    catalog = _catalog_from(args)
    if args.index_command == "rebuild":
        return _print(rebuild_index(catalog, args.identifier).lines())
    result = check_index(catalog, args.identifier)
    _print(result.lines)
    return EXIT_OK if result.ok else EXIT_FAILED


def _check(args: argparse.Namespace) -> int:
    import yaml

    from service.check import run_checks
    from service.config import redacted_dict
    from service.jobs import build_jobs

    config = _load(args.config)
    _configure_logging(config)
    build_jobs(config)  # what `floe ingest` refuses as a configuration (exit 2), `check` refuses alike
    print("configuration: valid")
    if args.show_config:
        print(yaml.safe_dump(redacted_dict(config), sort_keys=False).rstrip())
    results = run_checks(config)
    _print([r.line() for r in results])
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _compact(args: argparse.Namespace) -> int:
    import threading

    from runtime.signals import install_stop_signals

    stop = threading.Event()
    install_stop_signals(stop, logging.getLogger("floe.compact"))  # first: a signal during start-up stops too
    from service.compact_command import run_compactor

    config = _load(args.config)
    _configure_logging(config)
    return run_compactor(config, once=args.once, stop=stop)


def _ingest(args: argparse.Namespace) -> int:
    import threading

    from runtime.signals import install_stop_signals

    stop = threading.Event()
    install_stop_signals(stop, logging.getLogger("floe.ingest"))  # first: a signal during start-up stops too
    from service.ingest_command import run_ingest_service
    from service.jobs import SkipOptionError, command_line_skips

    config = _load(args.config)
    _configure_logging(config)
    try:
        skip = command_line_skips(config, args.skip or ())
    except SkipOptionError as exc:
        raise UsageError(str(exc)) from None
    return run_ingest_service(config, stop=stop, skip=skip)


def _demo(args: argparse.Namespace) -> int:
    from runtime.logging import configure_logging
    from service.demo import DemoOptions, run_demo

    # the demo prints its own progress; components log only what needs attention
    configure_logging(os.environ.get(LOG_LEVEL_ENV, "WARNING"), sys.stderr, os.environ.get(LOG_FORMAT_ENV, "auto"))
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="floe-demo-"))
    return run_demo(DemoOptions(work_dir=work, duration_s=args.duration, rate=args.rate))


# ---------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------


def _config_option(required: bool) -> argparse.ArgumentParser:
    """``--config``, accepted before or after the subcommand's own arguments."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--config", required=required, help="Floe configuration file (YAML)")
    return options


def _catalog_options() -> argparse.ArgumentParser:
    """How ``floe table`` finds the catalog; given after ``table`` or after its subcommand."""
    options = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    options.add_argument("--config", help="Floe configuration file (for the catalog)")
    options.add_argument("--catalog-uri", help="catalog URI, instead of --config (sqlite:////abs/catalog.db)")
    options.add_argument("--warehouse", help="warehouse location, with --catalog-uri")
    options.add_argument("--catalog-name", help="catalog name, with --catalog-uri (default: floe)")
    return options


def _add_table_commands(commands: argparse._SubParsersAction) -> None:
    catalog = _catalog_options()
    table = commands.add_parser(
        "table", parents=[catalog], help="inspect a table: list, describe, history, files, scan; upgrade its format"
    )
    sub = table.add_subparsers(dest="table_command", required=True)
    sub.add_parser("list", parents=[catalog], help="every table in the catalog")
    for name, text in (
        ("describe", "schema, partition specs, sort order, properties"),
        ("history", "snapshots of the main branch with their summaries"),
        ("files", "live data files with sizes, rows and delete counts"),
        ("scan", "live rows as JSON lines (deletes applied)"),
    ):
        view = sub.add_parser(name, parents=[catalog], help=text)
        view.add_argument("identifier", help="namespace.table")
        if name == "scan":
            view.add_argument("--limit", type=int, default=20, help="rows to print at most (default: 20)")
            view.add_argument(
                "--columns", action="append", metavar="A,B", help="columns to print, comma-separated (default: all)"
            )
    upgrade = sub.add_parser("upgrade", parents=[catalog], help="upgrade the table's format version (2 to 3)")
    upgrade.add_argument("identifier", help="namespace.table")
    upgrade.add_argument("--format-version", type=int, choices=(3,), required=True, help="the version to upgrade to")
    rewrite = sub.add_parser(
        "rewrite-position-deletes",
        parents=[catalog],
        help="fold a v3 table's position delete files into deletion vectors",
    )
    rewrite.add_argument("identifier", help="namespace.table")
    _name_choices(sub)
    table.set_defaults(func=_table)


def _add_index_commands(commands: argparse._SubParsersAction) -> None:
    catalog = _catalog_options()
    index = commands.add_parser("index", parents=[catalog], help="an upsert table's key index: check, rebuild")
    sub = index.add_subparsers(dest="index_command", required=True)
    for name, text in (
        ("check", "compare the key index with the table's live rows (exit 1 when they disagree)"),
        ("rebuild", "build a new key index from the table and commit it, replacing the current one"),
    ):
        command = sub.add_parser(name, parents=[catalog], help=text)
        command.add_argument("identifier", help="namespace.table")
    _name_choices(sub)
    index.set_defaults(func=_index)


def build_parser() -> argparse.ArgumentParser:
    from service.metrics import floe_version

    parser = argparse.ArgumentParser(
        prog="floe", description="Land Kafka topics in Apache Iceberg tables (format v2 or v3)."
    )
    parser.add_argument("--version", action="version", version=f"floe {floe_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser(
        "check",
        parents=[_config_option(True)],
        help="validate a configuration and reach Kafka, the catalog, the warehouse",
    )
    check.add_argument("--show-config", action="store_true", help="print the effective configuration, secrets masked")
    check.set_defaults(func=_check)

    ingest = commands.add_parser(
        "ingest", parents=[_config_option(True)], help="run the streaming job: one query per table, until stopped"
    )
    ingest.add_argument(
        "--skip",
        action="append",
        metavar="TOPIC/PARTITION@OFFSET",
        help="skip this record, whatever it holds, in every table that reads its topic (repeatable; "
        "e.g. the place a 'bad record at orders/0@50' failure names). The batch holding it "
        "lands every other record and lists it in its snapshot summary (floe table history). "
        "For this run only: tables[].skip_records keeps a skip across restarts",
    )
    ingest.set_defaults(func=_ingest)

    compact = commands.add_parser(
        "compact", parents=[_config_option(True)], help="run the compactor: hourly by default, or one round with --once"
    )
    compact.add_argument("--once", action="store_true", help="compact every table once, then exit")
    compact.set_defaults(func=_compact)

    _add_table_commands(commands)
    _add_index_commands(commands)

    demo = commands.add_parser("demo", help="run Floe on embedded defaults (local Kafka, SQLite catalog)")
    demo.add_argument(
        "--work-dir", help="where the demo keeps its broker, catalog and warehouse (default: a new temp dir)"
    )
    demo.add_argument("--duration", type=float, default=60.0, help="seconds of order events to produce (default: 60)")
    demo.add_argument("--rate", type=int, default=200, help="order events per second (default: 200)")
    demo.set_defaults(func=_demo)
    _name_choices(commands)
    return parser


def _name_choices(subcommands: argparse._SubParsersAction) -> None:
    """A missing subcommand is reported by its choices (``required: {list,describe,...}``), not by the
    internal name argparse would print otherwise (``required: table_command``)."""
    subcommands.metavar = "{" + ",".join(subcommands.choices) + "}"


# ---------------------------------------------------------------------------
# Running a command
# ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from runtime.logging import LogSettingError
    from service.config import ConfigError

    try:
        _configure_logging()
    except LogSettingError as exc:  # a bad FLOE_LOG_LEVEL or FLOE_LOG_FORMAT
        variable = LOG_LEVEL_ENV if exc.setting == "log level" else LOG_FORMAT_ENV
        print(f"floe: {variable}: {exc.reason()}", file=sys.stderr)
        return EXIT_CONFIG
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError as exc:
        if _stdout_reader_gone():
            return EXIT_CLOSED_PIPE
        return _fail(args, exc)
    except ConfigError as exc:
        print(f"floe: invalid configuration ({exc.source}):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_CONFIG
    except UsageError as exc:
        print(f"floe {_command(args)}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_STOPPED
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line (and a traceback at DEBUG)
        return _fail(args, exc)


def _fail(args: argparse.Namespace, error: Exception) -> int:
    from runtime.logging import redact_text
    from service.failures import explain

    if logging.getLogger().isEnabledFor(logging.DEBUG):
        print(redact_text("".join(traceback.format_exception(error))), end="", file=sys.stderr)
    print(f"floe {_command(args)}: {explain(error)}", file=sys.stderr)
    return EXIT_FAILED


def _command(args: argparse.Namespace) -> str:
    sub = getattr(args, "table_command", None) or getattr(args, "index_command", None)
    return f"{args.command} {sub}" if sub else str(args.command)


def _stdout_reader_gone() -> bool:
    """Whether stdout's reader went away (``floe table scan | head``): then the command ends
    quietly, as Unix tools do. Later writes go to /dev/null, so that flushing at exit cannot fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):  # a pipe without reader: POLLERR
        return False
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return True


if __name__ == "__main__":
    sys.exit(main())
