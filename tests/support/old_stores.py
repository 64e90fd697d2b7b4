"""Run store files as earlier versions of simrun left them, for the schema upgrade tests:
`old_store_file`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

from simrun import db
from simrun.runstore.schema import COMPONENT, MIGRATIONS


@asynccontextmanager
async def old_store_file(path: Path, steps: int) -> AsyncIterator[aiosqlite.Connection]:
    """A run store file at ``path`` written by the first ``steps`` schema migrations, with
    one running run ``old``; the connection adds more rows before it is closed."""
    conn = await db.connect(path)
    try:
        await db.migrate(conn, COMPONENT, MIGRATIONS[:steps])
        await conn.execute(
            "INSERT INTO runs (id, model, state, document, created_s, updated_s)"
            " VALUES ('old', '', 'running', '', 1, 1)"
        )
        yield conn
    finally:
        await conn.close()
