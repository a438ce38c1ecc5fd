"""Statements of simulations and of the surrogates trained on them.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

import polars as pl

from difftune_pipeline.warehouse.connection import Db, query


def simulated_pairs_done(db: Db, iterations: int, table_ids: list[str]) -> set[tuple[str, str]]:
    """(block, table) pairs of ``table_ids`` already simulated, whatever their status."""
    done = query(
        "SELECT block_id, table_id FROM simulations WHERE iterations = ? AND table_id IN (SELECT unnest(?))",
        db,
        [iterations, table_ids],
    )
    return set(zip(done["block_id"].to_list(), done["table_id"].to_list()))


def simulated_cycles(db: Db, iterations: int, table_ids: list[str]) -> pl.DataFrame:
    """block_id, table_id, cycles of the pairs the engine simulated successfully."""
    return query(
        "SELECT block_id, table_id, cycles FROM simulations WHERE status = 'ok' AND iterations = ? "
        "AND table_id IN (SELECT unnest(?)) ORDER BY block_id, table_id",
        db,
        [iterations, table_ids],
    )


def simulation_totals(db: Db, table_ids: list[str]) -> tuple:
    """(pairs, sum of cycles) simulated successfully under ``table_ids``: what a surrogate trained on."""
    return query(
        "SELECT count(*) AS n, sum(cycles) AS s FROM simulations WHERE status = 'ok' "
        "AND table_id IN (SELECT unnest(?))",
        db,
        [table_ids],
    ).row(0)


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
