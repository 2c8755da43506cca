"""Which dependency a table's failed batch blames: the ``cause`` label of
``floe_ingest_table_failures_total``. Pure.

A dashboard tells a catalog outage from a storage outage by this label, so
an operator knows which server to look at before reading a log line. The
error is named by its class or one of its bases, along its chain of causes;
an error that crossed Spark's JVM is text by then, and its cause's class name
is read from that text (:func:`runtime.logging.summarize_error`).
"""

from __future__ import annotations

from runtime.logging import summarize_error

CAUSES = ("catalog", "storage", "kafka", "schema_registry", "other")

_NAMES = {
    "catalog": frozenset(
        {
            "CatalogError",
            "CatalogDatabaseError",
            "CommitFailed",
            "CommitConflict",
            "CommitStateUnknown",
            "CommitNotApplied",
            "RestCatalogError",
            "NoSuchTable",
            "NoSuchNamespace",
            "NoSuchCatalog",
        }
    ),
    "storage": frozenset({"FileIOError", "MissingFileError"}),
    "kafka": frozenset({"KafkaException", "KafkaError", "KafkaUnreachable"}),
    "schema_registry": frozenset({"RegistryUnavailableError"}),
}
_STORAGE_TEXT = ("AWS Error", "S3 error")  # pyarrow's own OSError from an object store


def failure_cause(error: BaseException) -> str:
    """``catalog``, ``storage``, ``kafka``, ``schema_registry``, or ``other``."""
    for link in _chain(error):
        for cls in type(link).__mro__:
            cause = _by_name(cls.__name__)
            if cause is not None:
                return cause
    summary = summarize_error(error)
    cause = _by_name(summary.partition(":")[0].rsplit(".", 1)[-1])
    if cause is not None:
        return cause
    return "storage" if any(text in summary for text in _STORAGE_TEXT) else "other"


def _by_name(name: str) -> str | None:
    return next((cause for cause, names in _NAMES.items() if name in names), None)


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes (``raise ... from``) and contexts, each once."""
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and all(link is not s for s in seen):
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen
