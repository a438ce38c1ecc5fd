"""Statements of evaluation: block features, predictions, evaluations, the
comparisons an evaluation set side by side and the results summary.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

import duckdb
import polars as pl

from difftune_pipeline.warehouse.connection import Db, insert_new, now, query
from difftune_pipeline.warehouse.simulations import PREDICTED


def feature_block_ids(db: Db, table_id: str) -> set[str]:
    return set(query("SELECT block_id FROM block_features WHERE table_id = ?", db, [table_id])["block_id"])


def bottlenecks(db: Db, table_id: str) -> pl.DataFrame:
    return query("SELECT block_id, bottleneck FROM block_features WHERE table_id = ?", db, [table_id])


def bottleneck_counts(db: Db, table_id: str) -> pl.DataFrame:
    return query(
        "SELECT bottleneck, count(*) AS n FROM block_features WHERE table_id = ? GROUP BY 1 ORDER BY n DESC",
        db,
        [table_id],
    )


def predictions(db: Db, table_id: str, measure: str = "steady", iterations: int = 100) -> pl.DataFrame:
    """block_id and ``cycles``: a table's predicted cycles per 100 iterations, as ``measure`` reads them."""
    column = PREDICTED[measure]
    return query(
        f"SELECT block_id, {column}::DOUBLE AS cycles FROM predictions WHERE table_id = ? AND iterations = ?",
        db,
        [table_id, iterations],
    )


def evaluated(db: Db, table_id: str, uarch: str) -> bool:
    return not query("SELECT 1 FROM evaluations WHERE table_id = ? AND uarch = ?", db, [table_id, uarch]).is_empty()


def evaluations(db: Db, uarch: str, table_ids: list[str], measure: str = "steady") -> pl.DataFrame:
    return query(
        "SELECT * EXCLUDE (measure) FROM evaluations WHERE uarch = ? AND measure = ? "
        "AND table_id IN (SELECT unnest(?)) ORDER BY split, slice, table_id",
        db,
        [uarch, measure, table_ids],
    )


def record_comparison(
    con: duckdb.DuckDBPyConnection,
    uarch: str,
    llvm_mca_id: str,
    default_id: str,
    learned_id: str,
    model: str,
    measure: str,
    worse: float | None,
) -> None:
    """What an evaluation compared, scored by ``measure``, and the share of test blocks
    the learned table predicts more than 20 points worse than the default table; the
    newest row of a µarch is what ``results`` shows."""
    con.execute(
        "INSERT INTO comparisons VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT DO UPDATE SET evaluated_at = excluded.evaluated_at, measure = excluded.measure, "
        "test_worse_share = excluded.test_worse_share",
        [uarch, llvm_mca_id, default_id, learned_id, model, now(), measure, worse],
    )


def save_block_slices(con: duckdb.DuckDBPyConnection, uarch: str, memberships: pl.DataFrame, code: str) -> int:
    """The µarch's slice memberships drawn by ``code``, replacing the last ones (a new
    default table moves blocks between slices)."""
    con.execute("DELETE FROM block_slices WHERE uarch = ?", [uarch])
    frame = memberships.with_columns(pl.lit(uarch).alias("uarch"), pl.lit(code).alias("code_version"))
    return insert_new(con, "block_slices", frame, ["uarch", "block_id", "slice"])


def has_block_slices(db: Db, uarch: str, code: str) -> bool:
    """Whether the µarch's slices were drawn by ``code``."""
    sql = "SELECT 1 FROM block_slices WHERE uarch = ? AND code_version = ? LIMIT 1"
    return not query(sql, db, [uarch, code]).is_empty()


def forget_evaluations(con: duckdb.DuckDBPyConnection, uarch: str, table_ids: list[str]) -> None:
    """The per-slice figures of ``table_ids`` on ``uarch``, dropped: slices drawn again change them."""
    con.execute("DELETE FROM evaluations WHERE uarch = ? AND table_id IN (SELECT unnest(?))", [uarch, table_ids])


def block_slices(db: Db, uarch: str) -> pl.DataFrame:
    return query("SELECT block_id, slice FROM block_slices WHERE uarch = ?", db, [uarch])


def results(db: Db) -> pl.DataFrame:
    """Per µarch with usable measurements: blocks measured, and from its newest
    comparison the model chosen, the test blocks, and test MAPE and Kendall tau of
    llvm-mca as shipped, LLVM's table under the chosen model, and the learned table
    (nulls before any evaluation)."""
    return query(
        """
        WITH latest AS (
            SELECT * FROM comparisons
            QUALIFY row_number() OVER (PARTITION BY uarch ORDER BY evaluated_at DESC) = 1),
        measured AS (
            SELECT m.uarch, count(DISTINCT m.block_id) AS blocks
            FROM usable_measurements m JOIN blocks b USING (block_id) WHERE b.status = 'ok' GROUP BY m.uarch),
        test AS (SELECT table_id, uarch, measure, n, mape, kendall_tau FROM evaluations
                 WHERE split = 'test' AND slice = 'all')
        SELECT m.uarch, m.blocks, l.model, l.measure, coalesce(e.n, d.n, x.n) AS test_blocks,
               x.mape AS llvm_mca_mape, x.kendall_tau AS llvm_mca_tau,
               d.mape AS default_mape, d.kendall_tau AS default_tau,
               e.mape AS learned_mape, e.kendall_tau AS learned_tau, l.test_worse_share,
               l.llvm_mca_id, l.default_id, l.learned_id, l.evaluated_at
        FROM measured m LEFT JOIN latest l USING (uarch)
        LEFT JOIN test x ON x.uarch = m.uarch AND x.table_id = l.llvm_mca_id AND x.measure = l.measure
        LEFT JOIN test d ON d.uarch = m.uarch AND d.table_id = l.default_id AND d.measure = l.measure
        LEFT JOIN test e ON e.uarch = m.uarch AND e.table_id = l.learned_id AND e.measure = l.measure
        ORDER BY m.uarch
        """,
        db,
    )
