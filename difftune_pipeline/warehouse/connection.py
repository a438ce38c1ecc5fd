"""Connections to the DuckDB warehouse file.

DuckDB allows one writing process: writers hold a connection briefly inside
``writer()`` and commit as one transaction; every query path opens the file
read-only, so a query can never write.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl

from difftune_pipeline.warehouse.schema import migrate

DEFAULT_PATH = Path("warehouse") / "difftune.duckdb"


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


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    """The single value of a one-row statement (the result is fully consumed:
    DuckDB 2.0 fails the next statement while a result is open)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None


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
