"""A ``floe ingest`` refused once Spark is up: a catalog or object store it could not trust.

Kafka is probed before Spark starts and its refusal is the one line on stderr; the catalog and the
warehouse are first reached when the query starts, so their refusal is the one ERROR line of the JSON log.
"""

from __future__ import annotations

import subprocess

from tests.faults.rig import STACK_TRACE
from tests.ingest.e2e_support import json_log_records


def the_one_error_line(refused: subprocess.CompletedProcess) -> str:
    """Exit 1, exactly one ERROR line and no traceback in ``refused``'s output: that line's message."""
    output = refused.stdout + refused.stderr
    assert refused.returncode == 1, output[-3000:]
    errors = [r["message"] for r in json_log_records(refused.stderr) if r["level"] == "ERROR"]
    assert len(errors) == 1, errors
    assert not STACK_TRACE.search(output), output[-3000:]
    return errors[0]
