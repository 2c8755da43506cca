"""OAuth2 tokens for a REST catalog: when a token is replaced (pure, with a clock of our own)."""

from __future__ import annotations

import pytest

from commit.catalog.rest.auth import ClientCredentials, OAuthTokens, Token, refresh_due

CREDENTIALS = ClientCredentials("http://catalog/v1/oauth/tokens", "floe", "s3cr3t")


@pytest.mark.parametrize(("expires_in", "now", "due"), [
    (3600.0, 0.0, False),
    (3600.0, 3299.0, False),   # five minutes is the most kept in reserve
    (3600.0, 3300.0, True),
    (100.0, 79.0, False),      # a short token is replaced with a fifth of its life left
    (100.0, 80.0, True),
    (None, 10**9, False),      # no expiry given: kept until the server refuses it
])
def test_a_token_is_replaced_before_it_expires(expires_in, now, due) -> None:
    assert refresh_due(0.0, expires_in, now) is due


def test_tokens_are_fetched_when_first_needed_when_due_and_after_a_refusal() -> None:
    now = [0.0]
    issued: list[str] = []

    def fetch(credentials: ClientCredentials) -> Token:
        issued.append(f"t{len(issued)}")
        return Token(issued[-1], 100.0)

    tokens = OAuthTokens(CREDENTIALS, clock=lambda: now[0], fetch=fetch)
    assert issued == []  # nothing until a request needs it
    assert tokens.authorization() == "Bearer t0"
    now[0] = 79.0
    assert tokens.authorization() == "Bearer t0"
    now[0] = 80.0
    assert tokens.authorization() == "Bearer t1"
    tokens.refused("Bearer t0")  # a late 401 to an older token: the newer one stays
    assert tokens.authorization() == "Bearer t1"
    tokens.refused("Bearer t1")
    assert tokens.authorization() == "Bearer t2" and tokens.fetches == 3


def test_secrets_stay_out_of_repr() -> None:
    assert "s3cr3t" not in repr(CREDENTIALS) and "abc" not in repr(Token("abc", 1.0))
