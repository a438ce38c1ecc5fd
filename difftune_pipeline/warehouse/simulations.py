"""Statements of simulations (the chunks recorded, the rows read from their
files: ``simulation_files``) and of the surrogates trained on them.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from difftune_pipeline.warehouse import simulation_files
from difftune_pipeline.warehouse.connection import Db, insert_new, now, query
from difftune_pipeline.warehouse.simulation_files import CHUNK_COLUMNS


def record_chunks(con: duckdb.DuckDBPyConnection, records: list[dict]) -> int:
    """Chunks whose files are written, in ``simulation_chunks``; a chunk recorded
    already is left as it is. Returns how many were new."""
    if not records:
        return 0
    frame = pl.DataFrame(records).select(CHUNK_COLUMNS).with_columns(pl.lit(now()).alias("recorded_at"))
    return insert_new(con, "simulation_chunks", frame, ["chunk_key"])


def chunk_files(db: Db, table_ids: list[str], iterations: int | None = None) -> list[str]:
    """The recorded files of ``table_ids`` (of one iteration count, if given)."""
    return query(
        "SELECT file FROM simulation_chunks WHERE table_id IN (SELECT unnest(?)) AND (? IS NULL OR iterations = ?) "
        "ORDER BY table_id, file",
        db,
        [table_ids, iterations, iterations],
    )["file"].to_list()


def _rows(db: Db, table_ids: list[str], iterations: int | None, columns: list[str], ok_only: bool) -> pa.Table:
    """Columns of the simulated rows of ``table_ids``, read from their chunks' files only."""
    wanted = pc.field("table_id").isin(table_ids)
    if iterations is not None:
        wanted &= pc.field("iterations") == iterations
    if ok_only:
        wanted &= pc.field("status") == "ok"
    return simulation_files.dataset(db, chunk_files(db, table_ids, iterations)).to_table(columns=columns, filter=wanted)


def simulated_pairs_done(db: Db, iterations: int, table_ids: list[str]) -> set[tuple[str, str]]:
    """(block, table) pairs of ``table_ids`` already simulated, whatever their status."""
    done = _rows(db, table_ids, iterations, ["block_id", "table_id"], ok_only=False)
    return set(zip(done["block_id"].to_pylist(), done["table_id"].to_pylist()))


def simulated_cycles(db: Db, iterations: int, table_ids: list[str]) -> pl.DataFrame:
    """block_id, table_id, cycles of the pairs the engine simulated successfully."""
    rows = _rows(db, table_ids, iterations, ["block_id", "table_id", "cycles"], ok_only=True)
    return pl.from_arrow(rows).sort("block_id", "table_id")


def simulation_totals(db: Db, table_ids: list[str]) -> tuple:
    """(pairs, sum of cycles) simulated successfully under ``table_ids``: what a surrogate trained on."""
    cycles = _rows(db, table_ids, None, ["cycles"], ok_only=True)["cycles"]
    return len(cycles), (pc.sum(cycles).as_py() if len(cycles) else None)


def surrogate_run(db: Db, run_id: str) -> dict | None:
    rows = query("SELECT * FROM surrogate_runs WHERE run_id = ?", db, [run_id])
    return None if rows.is_empty() else rows.row(0, named=True)


def surrogate_runs(db: Db, mcpu: str, model: str) -> list[dict]:
    """Runs of one model for ``mcpu``, newest first."""
    return query(
        "SELECT * FROM surrogate_runs WHERE mcpu = ? AND model = ? ORDER BY created_at DESC", db, [mcpu, model]
    ).to_dicts()


def surrogate_summary(db: Db) -> pl.DataFrame:
    return query(
        "SELECT run_id, mcpu, model, n_train, round(100 * heldout_mape, 2) AS heldout_mape_pct, "
        "heldout_kendall_tau, round(train_seconds, 1) AS train_seconds, created_at "
        "FROM surrogate_runs ORDER BY created_at DESC",
        db,
    )
