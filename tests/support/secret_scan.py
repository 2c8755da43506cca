"""The secret scan of the secured tests: no password, token or private key in anything Floe put out.

Each secured test gathers what an operator or a reader of the topics could see (Floe's log with Spark's
and librdkafka's lines in it, ``/metrics``, ``floe check --show-config``, dead letters with their headers)
and the secrets it configured, and :func:`assert_no_secret` fails naming the source and the secret's kind,
never the secret itself. A secret is looked for as given and in the forms a log could carry it: base64,
hex and URL-quoted.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from collections.abc import Mapping

PRIVATE_KEY_MARKERS = ("PRIVATE KEY-----",)


def forms(secret: str) -> set[str]:
    """``secret`` as given, and as base64, hex and URL-quoting would print it."""
    raw = secret.encode()
    return {secret, base64.b64encode(raw).decode().rstrip("="), binascii.hexlify(raw).decode(),
            urllib.parse.quote(secret, safe="")}


def findings(outputs: Mapping[str, str | bytes], secrets: Mapping[str, str]) -> list[str]:
    """``"<output>: <secret name>"`` for each secret (or private key) found in each output."""
    found = []
    for source, output in outputs.items():
        text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
        for name, secret in secrets.items():
            if any(form in text for form in forms(secret)):
                found.append(f"{source}: {name}")
        if any(marker in text for marker in PRIVATE_KEY_MARKERS):
            found.append(f"{source}: a private key")
    return found


def assert_no_secret(outputs: Mapping[str, str | bytes], secrets: Mapping[str, str]) -> None:
    assert secrets and all(len(s) >= 8 for s in secrets.values()), "scan for real secrets, not empty ones"
    found = findings(outputs, secrets)
    assert not found, f"secrets in Floe's output: {found}"
