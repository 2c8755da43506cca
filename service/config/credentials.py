"""Secrets in the config: a ``SecretStr`` (masked in ``repr`` and dumps) or a ``*_file``.

A ``*_file`` (a mounted Kubernetes Secret) is read only when the value is
used, so the secret never sits in the validated model. Passwords inside URIs
are refused: a URI is shown in messages and logs, a ``SecretStr`` is not.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr

from commit.catalog.sql.uri import redact_uri
from service.config.problems import Problem


def read_secret_file(path: Path) -> str:
    """A secret from a mounted file, without the trailing newline editors and ``echo`` leave."""
    return path.read_text().rstrip("\r\n")


def secret_value(inline: SecretStr | None, file: Path | None) -> str | None:
    """The secret given inline or in ``file`` (read now); None when neither is set. Never log it."""
    if inline is not None:
        return inline.get_secret_value()
    return read_secret_file(file) if file is not None else None


def secret_source_problems(key: str, inline: object, file: object, *, required: bool = False) -> list[Problem]:
    """``key`` and ``key_file`` together would leave one silently unused."""
    given = (inline is not None) + (file is not None)
    if given == 2 or (required and given == 0):
        return [(key, f"set {'exactly' if required else 'at most'} one of {key} and {key}_file")]
    return []


def url_password_problems(key: str, url: str, instead: str) -> list[Problem]:
    """A password in ``url`` (user info or a ``password=`` query parameter), which would leak in logs."""
    parts = urlsplit(url)
    if parts.password is None and "password=" not in parts.query.lower():
        return []
    return [(key, f"must not contain a password; use {instead} (got {redact_uri(url)!r})")]
