"""Statements of simulations (the chunks recorded, the rows read from their
files: ``simulation_files``) and of the surrogates trained on them.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from difftune_pipeline.warehouse import simulation_files
from difftune_pipeline.warehouse.connection import Db, insert_new, now, query, writer
from difftune_pipeline.warehouse.simulation_files import CHUNK_COLUMNS
from difftune_pipeline.warehouse.versions import forget_versions


def record_chunks(con: duckdb.DuckDBPyConnection, records: list[dict]) -> int:
    """Chunks whose files are written, in ``simulation_chunks``; a chunk recorded
    already is left as it is. Returns how many were new."""
    if not records:
        return 0
    frame = pl.DataFrame(records).select(CHUNK_COLUMNS).with_columns(pl.lit(now()).alias("recorded_at"))
    return insert_new(con, "simulation_chunks", frame, ["chunk_key"])


def damaged_chunks(db: Db, table_ids: list[str] | None) -> list[tuple[str, str, str]]:
    """(chunk key, file, why) of the recorded chunks of ``table_ids`` (None: every one) whose
    file is gone or is not the one written (its size, footer or SHA-256): their pairs count as not simulated."""
    rows = query(
        "SELECT chunk_key, file, bytes, rows, sha256 FROM simulation_chunks "
        "WHERE ?::VARCHAR[] IS NULL OR table_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY chunk_key",
        db,
        [table_ids, table_ids],
    )
    keys = dict(zip(rows["file"], rows["chunk_key"]))
    damaged = simulation_files.damage(db, rows.select("file", "bytes", "rows", "sha256").rows(), full=True)
    return [(keys[file], file, why) for file, why in damaged]


def shard_damage(db: Db, mcpu: str, shard: str) -> list[tuple[str, str]]:
    """(file, why) of the recorded chunks of one shard whose file is gone or not the
    one written, by the cheap check (size, footer): what a shard would simulate again."""
    rows = query(
        "SELECT file, bytes, rows, sha256 FROM simulation_chunks WHERE mcpu = ? AND shard = ? ORDER BY chunk_key",
        db,
        [mcpu, shard],
    )
    return simulation_files.damage(db, rows.rows(), full=False)


def verified(db: Db, table_ids: list[str]) -> None:
    """Before anything learns from the chunks of ``table_ids``: each checked in full.
    Damaged ones are forgotten (their shards simulate them again) and ``DamagedChunks`` names them."""
    damaged = damaged_chunks(db, table_ids)
    if damaged:
        with writer(db) as con:
            forget_chunks(con, [key for key, _, _ in damaged])
        raise simulation_files.DamagedChunks(db, [(file, why) for _, file, why in damaged])


def chunk_totals(db: Db) -> tuple[int, int]:
    """(chunks, bytes) recorded."""
    return query("SELECT count(*) AS n, coalesce(sum(bytes), 0)::BIGINT AS b FROM simulation_chunks", db).row(0)


def forget_chunks(con: duckdb.DuckDBPyConnection, keys: list[str]) -> None:
    """Their pairs count as not simulated: the shards that hold them are not up to date."""
    con.execute("DELETE FROM simulation_chunks WHERE chunk_key IN (SELECT unnest(?))", [keys])
    if keys:
        forget_versions(con, "simulations")


def chunk_files(db: Db, table_ids: list[str], iterations: int | None = None) -> list[str]:
    """The recorded files of ``table_ids`` (of one iteration count, if given)."""
    return query(
        "SELECT file FROM simulation_chunks WHERE table_id IN (SELECT unnest(?)) AND (? IS NULL OR iterations = ?) "
        "ORDER BY table_id, file",
        db,
        [table_ids, iterations, iterations],
    )["file"].to_list()


def simulated_pairs_done(db: Db, iterations: int, table_ids: list[str]) -> set[tuple[str, str]]:
    """(block, table) pairs of ``table_ids`` already simulated, whatever their status,
    read from their chunks' files only."""
    wanted = pc.field("table_id").isin(table_ids) & (pc.field("iterations") == iterations)
    files = simulation_files.dataset(db, chunk_files(db, table_ids, iterations))
    done = files.to_table(columns=["block_id", "table_id"], filter=wanted)
    return set(zip(done["block_id"].to_pylist(), done["table_id"].to_pylist()))


def simulation_totals(db: Db, table_ids: list[str]) -> tuple:
    """(pairs, sum of total cycles, sum of steady-state cycles) simulated successfully
    under ``table_ids``: what a surrogate trained on."""
    with _scan(db, None, table_ids, None) as con:
        return (
            con.sql(
                # the steady state summed in thousandths, as integers: a sum of doubles depends on the order
                "SELECT count(*) AS n, sum(cycles) AS s, sum(round(steady_cycles_per_100 * 1000)::BIGINT) AS steady "
                "FROM sims WHERE status = 'ok'"
            )
            .pl()
            .row(0)
        )


def simulated_rows(db: Db, mcpu: str) -> int:
    """Rows of the recorded chunks of ``mcpu``'s sampled tables (from their records: no file is read)."""
    sql = "SELECT coalesce(sum(rows), 0)::BIGINT AS n FROM simulation_chunks WHERE mcpu = ? AND shard <> ?"
    return int(query(sql, db, [mcpu, simulation_files.TUNING]).item())


# A pair as a surrogate streams it: block position, table position, the engine's cycles.
PAIR = np.dtype([("block", "<i4"), ("table", "<i4"), ("cycles", "<f4")])
# The column of a simulation's file that each measure (engine.MEASURES) reads.
PREDICTED = {"steady": "steady_cycles_per_100", "total": "cycles"}
SPILL_MEMORY = "128MB"  # what the sort of the pairs may hold in memory before it spills to disk


def pair_counts(db: Db, iterations: int, table_ids: list[str]) -> dict[str, int]:
    """Pairs simulated successfully per block under ``table_ids``."""
    with _scan(db, iterations, table_ids, None) as con:
        rows = con.execute(
            "SELECT block_id, count(*) FROM sims WHERE status = 'ok' AND iterations = ? GROUP BY block_id",
            [iterations],
        ).fetchall()
    return dict(rows)


def write_pairs(
    db: Db,
    iterations: int,
    table_ids: list[str],
    block_ids: list[str],
    held: np.ndarray,
    key: np.ndarray,
    folder: Path,
    measure: str = "steady",
) -> tuple[tuple[Path, int], tuple[Path, int], float]:
    """The pairs of ``table_ids`` over ``block_ids`` as ``PAIR`` records in two
    files of ``folder``: the trained-on pairs ordered by (``key`` of the block,
    block, table id), those of ``held``-out blocks by (block, table id); positions
    index ``block_ids`` and ``table_ids``. DuckDB sorts them, spilling to
    ``folder`` beyond ``SPILL_MEMORY``, and they are written a record batch at a
    time; their cycles are those ``measure`` reads. Returns each file with its
    pairs, and the trained-on pairs' median cycles (the lower middle one)."""
    blocks = pa.table(
        {
            "block_id": block_ids,
            "pos": np.arange(len(block_ids), dtype=np.int32),
            "key": np.asarray(key, dtype=np.int64),
            "held": np.asarray(held, dtype=bool),
        }
    )
    tables_ = pa.table({"table_id": table_ids, "tpos": np.arange(len(table_ids), dtype=np.int32)})
    pairs = (
        "FROM sims s JOIN blocks_ b USING (block_id) JOIN tables_ t USING (table_id) "
        "WHERE s.status = 'ok' AND s.iterations = ? AND b.held = ?"
    )
    out, predicted = [], PREDICTED[measure]
    with _scan(db, iterations, table_ids, folder) as con:
        con.register("blocks_", blocks)
        con.register("tables_", tables_)
        for name, is_held, order in (("train", False, "b.key, b.pos, s.table_id"), ("held", True, "b.pos, s.table_id")):
            path, n = folder / f"{name}.pairs", 0
            reader = con.sql(
                f"SELECT b.pos, t.tpos, s.{predicted}::FLOAT AS cycles {pairs} ORDER BY {order}",
                params=[iterations, is_held],
            ).to_arrow_reader(1 << 16)
            with open(path, "wb") as file:
                for batch in reader:
                    records = np.empty(batch.num_rows, dtype=PAIR)
                    for field, column in zip(PAIR.names, batch.columns):
                        records[field] = column.to_numpy()
                    records.tofile(file)
                    n += batch.num_rows
            out.append((path, n))
        median = con.execute(
            f"SELECT quantile_disc(s.{predicted}::FLOAT, 0.5) {pairs}", [iterations, False]
        ).fetchone()[0]
    return out[0], out[1], float(median) if median is not None else float("nan")


@contextlib.contextmanager
def _scan(
    db: Db, iterations: int | None, table_ids: list[str], spill: Path | None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB of this process's own (not the warehouse file: no lock held while
    it works) with ``sims``, the recorded chunks of ``table_ids``."""
    config = {"memory_limit": SPILL_MEMORY, "threads": 2}
    if spill is not None:
        config["temp_directory"] = str(spill / "spill")
    con = duckdb.connect(config=config)
    try:
        con.register("sims", simulation_files.dataset(db, chunk_files(db, table_ids, iterations)))
        yield con
    finally:
        con.close()


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
