"""What each asset partition stored, as the data version it reported: recorded
in the warehouse beside the data, so a run can tell "Dagster's instance says
this is up to date" from "and this warehouse still holds it" (a copied, rebuilt
or other warehouse under the same instance does not)."""

from __future__ import annotations

import duckdb

from difftune_pipeline.warehouse.connection import Db, now, query, writer


def record(db: Db, asset: str, partition: str | None, data_version: str) -> None:
    with writer(db) as con:
        con.execute(
            "INSERT OR REPLACE INTO asset_versions VALUES (?, ?, ?, ?)", [asset, partition or "", data_version, now()]
        )


def forget_versions(con: duckdb.DuckDBPyConnection, asset: str) -> None:
    """``asset``'s data versions, every partition's: its stored data was changed outside
    a materialisation, so the next run materialises it again."""
    con.execute("DELETE FROM asset_versions WHERE asset = ?", [asset])


def recorded(db: Db) -> dict[tuple[str, str], str]:
    """(asset, partition or '') -> the data version last recorded."""
    rows = query("SELECT asset, partition, data_version FROM asset_versions", db)
    return {(a, p): v for a, p, v in rows.iter_rows()}


def table_version(db: Db, table: str, where: str = "", params: list | None = None) -> str:
    """A fingerprint of the rows of ``table`` that ``where`` selects, timestamps
    aside (a step that finds its rows stored writes none, so its version stays)."""
    columns = query(f"DESCRIBE {table}", db)
    kept = [
        f'"{name}"'
        for name, kind in columns.select("column_name", "column_type").iter_rows()
        if "TIMESTAMP" not in kind
    ]
    row = query(
        f"SELECT count(*) AS n, coalesce(sum(hash({', '.join(kept)})), 0)::VARCHAR AS h FROM {table} {where}",
        db,
        params,
    ).row(0)
    return f"{row[0]}-{int(row[1]):x}"


def harness_version(db: Db, harness: str, uarch: str) -> str:
    """The version of the harness runs of the blocks measured on ``uarch``."""
    return table_version(
        db,
        "block_harness",
        "WHERE harness = ? AND block_id IN (SELECT block_id FROM measurements WHERE uarch = ?)",
        [harness, uarch],
    )


# The assets whose version is the fingerprint of their rows of one µarch: (table, µarch column).
PER_UARCH = {"block_features": ("block_features", "mcpu"), "evaluation": ("evaluations", "uarch")}


def uarch_version(db: Db, asset: str, uarch: str) -> str:
    """The version of what ``asset`` (one of ``PER_UARCH``) holds of ``uarch`` now."""
    table, column = PER_UARCH[asset]
    return table_version(db, table, f"WHERE {column} = ?", [uarch])
