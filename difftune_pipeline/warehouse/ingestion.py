"""Statements of ingestion: blocks, measurements, batches and their quarantine,
splits, and where a harness model puts each block's loads and stores.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl

from difftune_pipeline.warehouse.connection import Db, insert_new, query, scalar


def measured_blocks(db: Db, uarch: str, splits: list[str]) -> pl.DataFrame:
    """Decoded blocks of ``splits`` with their measured throughput on ``uarch``
    (the mean when several batches measured a block), ordered by block id."""
    return query(
        """
        SELECT b.block_id, b.hex, b.asm, b.n_insts, s.split, avg(m.cycles_per_100) AS cycles_per_100
        FROM usable_measurements m JOIN blocks b USING (block_id) JOIN splits s USING (block_id)
        WHERE m.uarch = ? AND b.status = 'ok' AND s.split IN (SELECT unnest(?))
        GROUP BY ALL ORDER BY b.block_id
        """,
        db,
        [uarch, splits],
    )


def measured_throughput(db: Db, block_id: str, uarch: str) -> float | None:
    """A block's measured cycles per 100 iterations on ``uarch`` (the mean over
    usable batches), or None when it was never measured there."""
    sql = "SELECT avg(cycles_per_100) AS c FROM usable_measurements WHERE block_id = ? AND uarch = ?"
    return query(sql, db, [block_id, uarch])["c"][0]


def measurement_totals(db: Db, uarch: str) -> tuple:
    """(rows, the usable batches' ids) of a µarch's measurements: changes whenever a
    batch lands or leaves, and is exact (a parallel sum of doubles is not)."""
    return query(
        "SELECT count(*) AS n, coalesce(list(DISTINCT batch_id ORDER BY batch_id), []) AS batches "
        "FROM usable_measurements WHERE uarch = ?",
        db,
        [uarch],
    ).row(0)


def measured_uarchs(db: Db) -> list[str]:
    """The µarchs with usable measurements: the partitions of the DiffTune assets."""
    return query("SELECT DISTINCT uarch FROM usable_measurements ORDER BY 1", db)["uarch"].to_list()


def block_sources(db: Db) -> pl.DataFrame:
    return query("SELECT block_id, app FROM block_sources", db)


def block_status_counts(db: Db) -> pl.DataFrame:
    return query("SELECT status, count(*) AS n, avg(n_insts) AS mean_insts FROM blocks GROUP BY 1 ORDER BY 1", db)


def exactness_sample(db: Db, uarch: str, n: int = 40) -> list[str]:
    """Hex of ``n`` measured blocks of ``uarch``, the same ones every time."""
    frame = query(
        "SELECT DISTINCT b.block_id, b.hex FROM blocks b JOIN usable_measurements m USING (block_id) "
        "WHERE b.status = 'ok' AND m.uarch = ? ORDER BY hash(b.block_id) LIMIT ?",
        db,
        [uarch, n],
    )
    return frame["hex"].to_list()


def ipc_figures(con: duckdb.DuckDBPyConnection, batch_id: str, max_ipc: float) -> tuple[int, float | None]:
    """How many measurements of a batch are above ``max_ipc`` instructions per cycle, and
    their median instructions per cycle (None: it has none), in one scan. The median is
    a t-digest's (``approx_quantile``): an exact median holds every value of the batch in
    memory, which no limit lets spill (millions of rows failed the ingestion's)."""
    n, median = con.execute(
        "SELECT count(*) FILTER (WHERE ipc > ?), approx_quantile(ipc, 0.5) FROM ("
        "SELECT 100.0 * b.n_insts / m.cycles_per_100 AS ipc FROM measurements m JOIN blocks b USING (block_id) "
        "WHERE m.batch_id = ?)",
        [max_ipc, batch_id],
    ).fetchone()
    return n, median


def quarantine_reasons(db: Db, top: int = 20) -> pl.DataFrame:
    """The commonest reasons, numbers folded so that similar reasons count together."""
    return query(
        "SELECT regexp_replace(reason, '[0-9]+', 'N', 'g') AS reason, count(*) AS n "
        "FROM quarantine GROUP BY 1 ORDER BY n DESC LIMIT ?",
        db,
        [top],
    )


def known_blocks(con: duckdb.DuckDBPyConnection, hexes: list[str]) -> dict[str, str | None]:
    """hex -> quarantine reason (None: decoded) of the blocks already stored."""
    return dict(con.execute("SELECT hex, reason FROM blocks WHERE hex IN (SELECT unnest(?))", [hexes]).fetchall())


def add_measurements(
    con: duckdb.DuckDBPyConnection, batch_id: str, source_file: str, uarch: str, rows: pl.DataFrame, at: datetime
) -> int:
    """``rows`` (line_no, block_id, cycles_per_100) of a batch being ingested: new rows
    (a batch's lines are added once, by the one reader that holds it)."""
    frame = rows.select(
        "block_id",
        uarch=pl.lit(uarch),
        cycles_per_100=pl.col("cycles_per_100").cast(pl.Float64),
        batch_id=pl.lit(batch_id),
        source_file=pl.lit(source_file),
        line_no=pl.col("line_no").cast(pl.Int64),
        ingested_at=pl.lit(at),
    )
    return _append(con, "measurements", frame)


def _append(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> int:
    if frame.is_empty():
        return 0
    con.register("_incoming", frame.to_arrow())
    try:
        cols = ", ".join(frame.columns)
        return scalar(con, f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming")
    finally:
        con.unregister("_incoming")


def add_block_sources(con: duckdb.DuckDBPyConnection, batch_id: str, app: str, rows: pl.DataFrame) -> int:
    """``rows`` (block_id, frequency) of one corpus file; a block the application listed before keeps its row."""
    frame = rows.select(
        "block_id", app=pl.lit(app), frequency=pl.col("frequency").cast(pl.Float64), batch_id=pl.lit(batch_id)
    )
    return insert_new(con, "block_sources", frame, ["block_id", "app"])


def add_quarantine(
    con: duckdb.DuckDBPyConnection, batch_id: str, source_file: str, rows: list[tuple[int, str, str]], at: datetime
) -> int:
    """(line number, raw line, reason) of the lines of a batch being ingested that were refused."""
    frame = pl.DataFrame(
        {
            "batch_id": batch_id,
            "source_file": source_file,
            "line_no": [r[0] for r in rows],
            "raw": [r[1] for r in rows],
            "reason": [r[2] for r in rows],
            "quarantined_at": at,
        },
        schema_overrides={"line_no": pl.Int64, "raw": pl.Utf8, "reason": pl.Utf8},
    )
    return _append(con, "quarantine", frame)


def blocks_without_split(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT block_id FROM blocks b WHERE NOT EXISTS (SELECT 1 FROM splits s WHERE s.block_id = b.block_id)"
        ).fetchall()
    ]


def split_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return dict(con.execute("SELECT split, count(*) FROM splits GROUP BY 1 ORDER BY 1").fetchall())
