"""``python -m ingest --job job.json``: run one ingest job in this process.

The job file is :func:`ingest.job.job_to_json`'s format. Logs are JSON lines
on stderr (one per batch, see :mod:`ingest.driver.batch`), through the service's
redacting formatter (:mod:`runtime.logging`). SIGTERM or SIGINT stops
the query gracefully. ``--metrics-port`` serves the ingest metrics.

Exit status: 0 when the query ended on its own (an ``available_now``
trigger) or was stopped; 1 when it failed; 2 for a bad job file.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runtime.logging import LOG_LEVELS, configure_logging
from runtime.signals import install_stop_signals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, type=Path, help="job spec JSON file")
    parser.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=_log_level,
        metavar="LEVEL",
        help=f"one of {', '.join(LOG_LEVELS)}, in any case (default INFO)",
    )
    args = parser.parse_args(argv)
    configure_logging(args.log_level)

    from ingest.job import JobSpecError, job_from_json

    try:
        job = job_from_json(json.loads(args.job.read_text(encoding="utf-8")))
    except (OSError, ValueError, JobSpecError) as exc:
        logging.getLogger("floe.ingest").error("bad job file %s: %s", args.job, exc)
        return 2
    return run(job, args.metrics_port)


def _log_level(text: str) -> str:
    """``--log-level``, checked here so that a bad one is a usage error (exit 2), not a traceback.

    Any case is accepted, as :func:`runtime.logging.configure_logging` accepts it.
    """
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.upper()


def run(job: Any, metrics_port: int | None) -> int:
    from prometheus_client import start_http_server

    from ingest.driver.metrics import IngestMetrics
    from ingest.driver.stream import run_ingest
    from ingest.job import as_dict
    from runtime.spark_session import build_spark_session

    log = logging.getLogger("floe.ingest")
    stop = threading.Event()
    install_stop_signals(stop, log)
    metrics = IngestMetrics()
    if metrics_port is not None:
        start_http_server(metrics_port)
    spark = build_spark_session(job.name, as_dict(job.spark_conf))
    try:
        query = run_ingest(job, spark, stop, metrics)
        query.await_termination()
        log.info("ingest query %s ended", job.name, extra={"table": job.table.identifier})
        return 0
    except Exception:
        log.exception("ingest query %s failed", job.name, extra={"table": job.table.identifier})
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
