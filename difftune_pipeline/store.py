"""The DuckDB warehouse: schema, migrations, transactional writes, read-only queries.

DuckDB allows one writing process: writers hold a connection briefly inside
``writer()``; every query path opens the file read-only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl

DEFAULT_PATH = Path("warehouse") / "difftune.duckdb"

# Each entry migrates the schema from version i to i + 1.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE blocks (
        block_id   VARCHAR PRIMARY KEY,   -- sha256 of the canonical lowercase hex, 16 hex digits
        hex        VARCHAR NOT NULL,
        n_insts    INTEGER,
        asm        VARCHAR,               -- AT&T, one instruction per line
        opcodes    VARCHAR[],             -- LLVM opcode names
        status     VARCHAR NOT NULL,      -- ok | quarantined
        reason     VARCHAR                -- why quarantined
    );
    CREATE TABLE block_sources (
        block_id   VARCHAR NOT NULL,
        app        VARCHAR NOT NULL,      -- source application (corpus file stem)
        frequency  DOUBLE NOT NULL,       -- static frequency in that application (BHive's weight)
        batch_id   VARCHAR NOT NULL,
        PRIMARY KEY (block_id, app)
    );
    CREATE TABLE splits (
        block_id   VARCHAR PRIMARY KEY,
        split      VARCHAR NOT NULL       -- train | val | test, from the block hash
    );
    CREATE TABLE batches (
        batch_id   VARCHAR PRIMARY KEY,   -- sha256 of scope and file bytes, 16 hex digits
        kind       VARCHAR NOT NULL,      -- measurements | corpus
        uarch      VARCHAR,               -- measurements: the µarch measured
        app        VARCHAR,               -- corpus: the application
        source_file VARCHAR NOT NULL,
        n_read     BIGINT NOT NULL,
        n_ingested BIGINT NOT NULL,
        n_quarantined BIGINT NOT NULL,
        ingested_at TIMESTAMP NOT NULL
    );
    CREATE TABLE measurements (
        block_id   VARCHAR NOT NULL,
        uarch      VARCHAR NOT NULL,
        cycles_per_100 DOUBLE NOT NULL,   -- BHive's unit: cycles per 100 iterations
        batch_id   VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        line_no    BIGINT NOT NULL,
        ingested_at TIMESTAMP NOT NULL,
        PRIMARY KEY (block_id, uarch, batch_id)
    );
    CREATE TABLE quarantine (
        batch_id   VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        line_no    BIGINT NOT NULL,
        raw        VARCHAR,
        reason     VARCHAR NOT NULL,
        quarantined_at TIMESTAMP NOT NULL,
        PRIMARY KEY (batch_id, line_no)
    );
    """,
]


def connect(path: str | Path = DEFAULT_PATH, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    path = Path(path)
    if read_only:
        if not path.exists():
            raise FileNotFoundError(f"no warehouse at {path}: materialise the pipeline first (make run)")
        return duckdb.connect(str(path), read_only=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    migrate(con)
    return con


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    return scalar(con, "SELECT max(version) FROM schema_version") or 0


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    """The single value of a one-row query (the result is fully consumed)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None


def migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring the schema to the newest version, each step in its own transaction."""
    version = schema_version(con)
    for target, ddl in enumerate(MIGRATIONS[version:], start=version + 1):
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(ddl)
            con.execute("INSERT INTO schema_version VALUES (?)", [target])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise


@contextlib.contextmanager
def writer(path: str | Path = DEFAULT_PATH) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived connection whose work commits as one transaction, or not at all."""
    con = connect(path)
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        con.close()


def query(sql: str, path: str | Path = DEFAULT_PATH, params: list | None = None) -> pl.DataFrame:
    """Run one statement on a read-only connection: a query can never write."""
    con = connect(path, read_only=True)
    try:
        return con.sql(sql, params=params or None).pl()
    finally:
        con.close()


def insert_new(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame, key: list[str]) -> int:
    """Insert the rows of ``frame`` whose key is not in ``table`` yet; returns how many."""
    if frame.is_empty():
        return 0
    con.register("_incoming", frame.to_arrow())
    try:
        on = " AND ".join(f"t.{k} = i.{k}" for k in key)
        cols = ", ".join(frame.columns)
        return scalar(
            con,
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming i "
            f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {on})",
        )
    finally:
        con.unregister("_incoming")
