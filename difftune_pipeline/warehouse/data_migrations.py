"""Migrations that move data rather than only change tables: each is given the
connection (inside the migration's transaction) and the warehouse's path."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb

from difftune_pipeline.warehouse.simulation_files import (
    CHUNK_COLUMNS,
    SCHEMA,
    ChunkWriter,
    chunk_key,
    default_root,
    filesystem,
    resolve,
)


def simulations_as_files(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """Simulations move from a table to Parquet files recorded in ``simulation_chunks``
    (``simulation_files``): each (table, shard) of the old table becomes one chunk's file
    beside the warehouse, and the table is dropped."""
    con.execute(
        """
        CREATE TABLE IF NOT EXISTS simulation_chunks (
            chunk_key  VARCHAR PRIMARY KEY,   -- what it simulated: µarch, LLVM, iterations, table, its blocks
            mcpu       VARCHAR NOT NULL,
            table_id   VARCHAR NOT NULL,
            iterations INTEGER NOT NULL,
            shard      VARCHAR NOT NULL,
            file       VARCHAR NOT NULL,      -- relative to the warehouse's folder, or a URI
            rows       BIGINT NOT NULL,
            failed     BIGINT NOT NULL,       -- rows whose status is not ok
            bytes      BIGINT NOT NULL,
            sha256     VARCHAR NOT NULL,      -- of the file's bytes
            recorded_at TIMESTAMP NOT NULL
        )
        """
    )
    if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'simulations'").fetchall():
        return
    groups = con.execute(
        "SELECT DISTINCT mcpu, llvm_version, iterations, table_id, shard FROM simulations ORDER BY ALL"
    ).fetchall()
    root = default_root(db)
    had = {
        c
        for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'simulations'").fetchall()
    }
    columns = ", ".join(c if c in had else f"NULL AS {c}" for c in SCHEMA.names)  # a column files gained since: null
    for mcpu, llvm_version, iterations, table_id, shard in groups:
        frame = (
            con.sql(
                f"SELECT {columns} FROM simulations WHERE mcpu = ? AND llvm_version = ? "
                "AND iterations = ? AND table_id = ? AND shard = ? ORDER BY block_id",
                params=[mcpu, llvm_version, iterations, table_id, shard],
            )
            .to_arrow_table()
            .cast(SCHEMA)
        )
        key = chunk_key(mcpu, llvm_version, iterations, table_id, frame["block_id"].to_pylist())
        record = ChunkWriter(root, str(db), mcpu, llvm_version, iterations, shard).write(key, table_id, frame)
        con.execute(
            "INSERT INTO simulation_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [*(record[c] for c in CHUNK_COLUMNS), datetime.now(UTC).replace(tzinfo=None)],
        )
    con.execute("DROP TABLE simulations")


def steady_state(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """Simulations, predictions and evaluations hold the steady state beside llvm-mca's
    Total Cycles (``engine.SimResult``). What was stored before has no steady state and
    is derived data: the chunks' files are removed and their records forgotten (their
    shards simulate them again), and predictions and evaluations are computed again by
    the next evaluation; an evaluation row now names the measure it scored."""
    _forget_simulations(con, db)
    con.execute(
        """
        DELETE FROM predictions;
        -- cycles per 100 iterations in steady state
        ALTER TABLE predictions ADD COLUMN IF NOT EXISTS steady_cycles_per_100 DOUBLE;
        DROP TABLE evaluations;
        CREATE TABLE evaluations (
            table_id   VARCHAR NOT NULL,
            uarch      VARCHAR NOT NULL,
            measure    VARCHAR NOT NULL,      -- what was scored: steady (BHive's quantity) | total (Total Cycles)
            split      VARCHAR NOT NULL,
            slice      VARCHAR NOT NULL,
            n          BIGINT NOT NULL,
            mape       DOUBLE,
            kendall_tau DOUBLE,
            evaluated_at TIMESTAMP NOT NULL,
            mean_signed_error DOUBLE,
            PRIMARY KEY (table_id, uarch, measure, split, slice)
        );
        ALTER TABLE comparisons ADD COLUMN IF NOT EXISTS measure VARCHAR DEFAULT 'total';  -- what the comparison scored
        -- the share of test blocks the learned table predicts more than 20 points worse than the default table
        ALTER TABLE comparisons ADD COLUMN IF NOT EXISTS test_worse_share DOUBLE;
        """
    )


def settled_steady_state(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """The engine reads the steady state over a longer window and runs a block that
    never repeats again, longer (docs/model.md): the steady states stored before are
    an older engine's, also under llvm-mca's own model, whose table ids do not name
    the engine's revision. Derived data, forgotten as ``steady_state`` forgets it:
    the shards simulate again, and the next evaluation predicts, scores and compares
    again (``results`` shows nothing of the older engine meanwhile). Files go before
    the records, in the migration's transaction: one that dies between leaves the
    records and its version unrecorded, and the next open removes what is left."""
    _forget_derived(con, db)


def canonical_zero_idioms(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """The engine takes a zero idiom in its other encoding (``xorl %r13d, %r13d`` as
    45 33 ed) for the idiom it is, as llvm-mca does on the block's text (blocks.cpp):
    what was simulated before gave those blocks a chain through the cleared
    register, under llvm-mca's own model too. Forgotten as ``settled_steady_state``
    forgets it. The ``blocks`` table's ``opcodes`` keep the disassembler's names
    (``XOR32rr_REV``): they are the bytes' own, and the engine reads no stored name."""
    _forget_derived(con, db)


def _forget_derived(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """Forgets what an older engine derived: the simulation chunks (files first), the
    predictions, evaluations and comparisons."""
    _forget_simulations(con, db)
    con.execute("DELETE FROM predictions; DELETE FROM evaluations; DELETE FROM comparisons")


def _forget_simulations(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """Removes every simulation chunk's file and forgets its record."""
    if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'simulation_chunks'").fetchall():
        return
    for (file,) in con.execute("SELECT file FROM simulation_chunks").fetchall():
        fs, path = filesystem(resolve(db, file))
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
    con.execute("DELETE FROM simulation_chunks")


def replaced_batches(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """A batch withdrawn because its file came to hold other bytes is ``replaced``, not
    ``dropped`` (a user's drop): its bytes, back in a file, are read again."""
    con.execute(
        "UPDATE batches SET status = 'replaced' WHERE kind = 'measurements' AND status = 'dropped' "
        "AND status_reason LIKE 'replaced by batch %: its file now holds other bytes'"
    )
