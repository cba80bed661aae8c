"""The session's PostgreSQL: with no server reachable and none named, the tests start a throwaway one."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.helpers.postgres import ENV_VAR, find_server

pytestmark = pytest.mark.postgres


def test_without_a_reachable_server_a_throwaway_one_is_started_and_removed(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    server = find_server(local_url="postgresql+psycopg://postgres@127.0.0.1:1/postgres")  # nothing listens there
    try:
        assert server.origin.startswith("throwaway server") and server.data_dir is not None
        engine = sa.create_engine(server.url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SHOW server_version")).scalar()
        engine.dispose()
    finally:
        server.stop()
    assert not server.data_dir.exists()


def test_a_named_server_that_does_not_answer_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "postgresql+psycopg://postgres@127.0.0.1:1/postgres")
    with pytest.raises(RuntimeError, match=f"{ENV_VAR}=.* is not reachable.*unset {ENV_VAR}"):
        find_server()
