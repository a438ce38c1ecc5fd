"""Statements of parameter tables: stored, loaded, and which is newest.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

import duckdb
import polars as pl

from difftune_pipeline.engine import mechanisms
from difftune_pipeline.engine.table import ParamTable
from difftune_pipeline.warehouse.connection import Db, connect, insert_new, now, query, scalar


def table_exists(db: Db, table_id: str) -> bool:
    return not query("SELECT 1 FROM param_tables WHERE table_id = ?", db, [table_id]).is_empty()


def save_table(
    con: duckdb.DuckDBPyConnection,
    table_id: str,
    table: ParamTable,
    *,
    kind: str,
    preset: str | None = None,
    seed: int | None = None,
    parent_id: str | None = None,
    space_id: str | None = None,
    note: str | None = None,
) -> bool:
    """Record a parameter table and its values; returns False when ``table_id`` is
    already stored, as a table of the same kind (another kind under the id is an
    error: a step would otherwise take, say, an imported table for its own)."""
    stored = scalar(con, "SELECT kind FROM param_tables WHERE table_id = ?", [table_id])
    if stored is not None and stored != kind:
        raise ValueError(f"table id {table_id!r} holds a table of kind {stored!r}, not {kind!r}: nothing stored")
    if stored is not None:
        return False
    scalar(
        con,
        "INSERT INTO param_tables VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [table_id, table.mcpu, table.llvm_version, kind, preset, seed, parent_id, space_id, now(), note],
    )
    insert_new(
        con,
        "param_values",
        table.to_frame().with_columns(pl.lit(table_id).alias("table_id")),
        ["table_id", "opcode", "param", "idx"],
    )
    return True


def save_sampled(
    con: duckdb.DuckDBPyConnection, table_id: str, mcpu: str, llvm_version: str, preset: str, seed: int, space_id: str
) -> bool:
    """Record a sampled table by its preset and seed (its values are regenerated
    from them, never stored); returns False when ``table_id`` is already stored."""
    return bool(
        scalar(
            con,
            "INSERT INTO param_tables VALUES (?, ?, ?, 'sampled', ?, ?, NULL, ?, ?, NULL) ON CONFLICT DO NOTHING",
            [table_id, mcpu, llvm_version, preset, seed, space_id, now()],
        )
    )


def stored_table(con: duckdb.DuckDBPyConnection, table_id: str) -> tuple[str, str, str, pl.DataFrame] | None:
    """(mcpu, LLVM version, kind, values sorted by opcode, param, idx) of a stored
    table; None when the id is not stored."""
    meta = con.execute("SELECT mcpu, llvm_version, kind FROM param_tables WHERE table_id = ?", [table_id]).fetchall()
    if not meta:
        return None
    values = con.sql(
        "SELECT opcode, param, idx, value FROM param_values WHERE table_id = ? ORDER BY ALL", params=[table_id]
    ).pl()
    return *meta[0], values


def load_table(db: Db, table_id: str) -> ParamTable:
    """A stored default, learned or imported table."""
    con = connect(db, read_only=True)
    try:
        stored = stored_table(con, table_id)
    finally:
        con.close()
    if stored is None:
        raise KeyError(f"no parameter table {table_id!r} in the warehouse")
    mcpu, llvm_version, kind, values = stored
    if values.is_empty():
        raise KeyError(f"table {table_id!r} ({kind}) is regenerated from its preset and seed, not stored")
    return ParamTable.from_frame(values, mcpu, llvm_version)


def latest_learned(db: Db, mcpu: str) -> str | None:
    """The id of the newest learned table of ``mcpu``."""
    rows = query(
        "SELECT table_id FROM param_tables WHERE kind = 'learned' AND mcpu = ? ORDER BY created_at DESC LIMIT 1",
        db,
        [mcpu],
    )
    return None if rows.is_empty() else rows["table_id"][0]


def learned_through(db: Db, mcpu: str, surrogate_run_id: str) -> dict:
    """table_id and note of the newest table learned through a surrogate run."""
    rows = query(
        "SELECT table_id, note FROM param_tables WHERE kind = 'learned' AND mcpu = ? AND note LIKE ? "
        "ORDER BY created_at DESC LIMIT 1",
        db,
        [mcpu, f"%{surrogate_run_id}%"],
    )
    if rows.is_empty():
        raise KeyError(f"no {mcpu} table learned through surrogate {surrogate_run_id}")
    return rows.row(0, named=True)


def table_note(db: Db, table_id: str) -> str | None:
    rows = query("SELECT note FROM param_tables WHERE table_id = ?", db, [table_id])
    return None if rows.is_empty() else rows["note"][0]


def latest_default_model(db: Db, mcpu: str) -> tuple[str, tuple[str, ...]] | None:
    """(table id, mechanisms) of the newest default table stored for ``mcpu``."""
    rows = query(
        """
        WITH latest AS (SELECT table_id FROM param_tables WHERE kind = 'default' AND mcpu = ?
                        ORDER BY created_at DESC LIMIT 1)
        SELECT l.table_id, list(v.param ORDER BY v.param) FILTER (WHERE v.param LIKE 'mechanism:%') AS mechanisms
        FROM latest l LEFT JOIN param_values v ON v.table_id = l.table_id AND v.opcode = '*' GROUP BY l.table_id
        """,
        db,
        [mcpu],
    )
    if rows.is_empty():
        return None
    names = {m.split(":", 1)[1] for m in rows["mechanisms"].to_list()[0] or []}
    return rows["table_id"][0], tuple(m for m in mechanisms.MECHANISMS if m in names)
