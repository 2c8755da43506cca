"""What an operator reads when a command fails: one line with the cause and what to do.

Every failure a user can meet is typed somewhere below ``service``: a missing
table or catalog, a table that no longer fits its configuration, a port in
use, a bad record under the ``fail`` policy, an unreachable broker. The
``floe`` command prints :func:`explain` of it, one line, and exits with the
documented code; the traceback is shown only at ``log_level: DEBUG``
(``FLOE_LOG_LEVEL=DEBUG`` for commands without a configuration).
"""

from __future__ import annotations

import logging
import re

from commit.errors import CatalogError, NoSuchCatalog, NoSuchTable
from ingest.driver.table_setup import TableMismatchError, TablePropertyError
from runtime.logging import redact_text, summarize_error
from service.http import PortInUse


class CommandError(Exception):
    """A command cannot go on; the message is the whole story, for one line."""


_BAD_RECORD = re.compile(
    r"BadRecordError: (?P<text>table \S+: bad record at (?P<ref>\S+): .*?bad_records policy is 'fail'\))"
)

BAD_RECORD_HINT = (
    "nothing of the batch was committed; to get past the record, skip exactly it (floe ingest --skip {ref}, "
    "or tables[].skip_records; README: 'A poison record'), or set bad_records: dead-letter "
    "(with a dead_letter_topic) for this table"
)


def explain(error: BaseException) -> str:
    """One line for ``error``: the cause, and what to do where Floe knows."""
    text = str(error)
    bad = _BAD_RECORD.search(text)
    if bad:
        return redact_text(f"{bad['text']}; {BAD_RECORD_HINT.format(ref=bad['ref'])}")
    hint = _hint(error)
    summary = (
        str(error)
        if isinstance(error, (CommandError, CatalogError, TableMismatchError, TablePropertyError, PortInUse))
        else None
    )
    line = summary.splitlines()[0] if summary else summarize_error(error)
    return redact_text(f"{line}; {hint}" if hint else line)


def _hint(error: BaseException) -> str | None:
    if isinstance(error, NoSuchTable):
        return "'floe table list' shows the tables of the catalog"
    if isinstance(error, NoSuchCatalog):
        return "check the catalog URI (inspection never creates a catalog)"
    if isinstance(error, TableMismatchError):
        return "'floe check' lists the differences; change the configuration back, or evolve the table"
    return None


def log_failure(log: logging.Logger, what: str, error: BaseException, **extra: object) -> None:
    """``<what>: <cause; what to do>`` as one error line; the traceback only at DEBUG."""
    trace = error if log.isEnabledFor(logging.DEBUG) else None
    log.error("%s: %s", what, explain(error), exc_info=trace, extra=extra)
