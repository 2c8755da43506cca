"""The cluster tests use the commit tests' real PostgreSQL server for their catalog."""

from tests.commit.conftest import postgres_database, postgres_server, postgres_uri  # noqa: F401
