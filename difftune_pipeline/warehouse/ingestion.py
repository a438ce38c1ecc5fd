"""Statements of ingestion: blocks, measurements, batches and their quarantine,
splits, and where a harness model puts each block's loads and stores.

Reads take the warehouse path and open it read-only; writes take the
connection of an open ``writer()`` transaction."""

from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl

from difftune_pipeline.warehouse.connection import Db, insert_new, now, query, scalar
from difftune_pipeline.warehouse.versions import forget_versions


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


def batch_records(db: Db, batch_ids: list[str]) -> dict[str, dict]:
    """batch id -> (status, and while it is ``ingesting``, who reads it and when it last
    committed a chunk) of those of ``batch_ids`` the warehouse records."""
    frame = query(
        "SELECT batch_id, status, owner, status_at FROM batches WHERE batch_id IN (SELECT unnest(?))", db, [batch_ids]
    )
    return {r["batch_id"]: r for r in frame.to_dicts()}


def batch_statuses(db: Db, batch_ids: list[str]) -> pl.DataFrame:
    """Per batch: its status (and why), rows read, ingested and quarantined."""
    return query(
        "SELECT batch_id, source_file, status, status_reason, n_read, n_ingested, n_quarantined "
        "FROM batches WHERE batch_id IN (SELECT unnest(?)) ORDER BY batch_id",
        db,
        [batch_ids],
    )


def implausible_measurements(con: duckdb.DuckDBPyConnection, batch_id: str, max_ipc: float) -> int:
    """How many measurements of a batch are above ``max_ipc`` instructions per cycle."""
    return scalar(
        con,
        "SELECT count(*) FROM measurements m JOIN blocks b USING (block_id) "
        "WHERE m.batch_id = ? AND 100.0 * b.n_insts / m.cycles_per_100 > ?",
        [batch_id, max_ipc],
    )


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


def stored_batch(con: duckdb.DuckDBPyConnection, batch_id: str) -> dict | None:
    """A batch's record (rows read, ingested, quarantined, status, the reader holding it
    while ``ingesting`` and when it last committed), or None."""
    rows = con.execute(
        "SELECT n_read, n_ingested, n_quarantined, status, owner, status_at FROM batches WHERE batch_id = ?",
        [batch_id],
    ).fetchall()
    keys = ("n_read", "n_ingested", "n_quarantined", "status", "owner", "status_at")
    return dict(zip(keys, rows[0])) if rows else None


def begin_batch(
    con: duckdb.DuckDBPyConnection,
    batch_id: str,
    kind: str,
    uarch: str | None,
    app: str | None,
    source_file: str,
    at: datetime,
    owner: str,
) -> None:
    """The record of a batch whose rows ``owner`` adds, chunk by chunk: ``ingesting``,
    so that none of them is usable before its verdict (``finish_batch``)."""
    _insert_batch(con, [batch_id, kind, uarch, app, source_file, at, "ingesting", None, at, owner])


def claim(con: duckdb.DuckDBPyConnection, batch_id: str, owner: str) -> bool:
    """Whether ``owner`` still holds the ingesting batch (it was not dropped or taken
    over), marking that it is alive; the chunk it commits with this is its own."""
    return bool(
        scalar(
            con,
            "UPDATE batches SET status_at = ? WHERE batch_id = ? AND status = 'ingesting' AND owner = ?",
            [now(), batch_id, owner],
        )
    )


def finish_batch(
    con: duckdb.DuckDBPyConnection,
    batch_id: str,
    owner: str,
    counts: tuple[int, int, int],
    problems: list[str],
    at: datetime,
) -> bool:
    """A batch ``owner`` read to its end, with its counts (read, ingested, quarantined)
    and its sanity verdict: ``failed_sanity`` (and why) when there are ``problems``.
    False when ``owner`` no longer holds it (nothing is changed then)."""
    return bool(
        scalar(
            con,
            "UPDATE batches SET n_read = ?, n_ingested = ?, n_quarantined = ?, status = ?, status_reason = ?, "
            "status_at = ?, owner = NULL WHERE batch_id = ? AND status = 'ingesting' AND owner = ?",
            [*counts, "failed_sanity" if problems else "ok", "; ".join(problems) or None, at, batch_id, owner],
        )
    )


def record_unread(
    con: duckdb.DuckDBPyConnection,
    batch_id: str,
    kind: str,
    uarch: str | None,
    app: str | None,
    source_file: str,
    status: str,
    reason: str,
    at: datetime,
) -> None:
    """A batch that ingested nothing because its bytes were gone or changed when read
    (``status`` changed | vanished), with ``reason``."""
    _insert_batch(con, [batch_id, kind, uarch, app, source_file, at, status, reason, at, None])


def _insert_batch(con: duckdb.DuckDBPyConnection, values: list) -> None:
    scalar(
        con,
        "INSERT INTO batches (batch_id, kind, uarch, app, source_file, n_read, n_ingested, n_quarantined, "
        "ingested_at, status, status_reason, status_at, owner) VALUES (?, ?, ?, ?, ?, 0, 0, 0, ?, ?, ?, ?, ?)",
        values,
    )


def forget_batch(con: duckdb.DuckDBPyConnection, batch_id: str) -> None:
    """Whatever a batch that was never fully read added (``ingesting`` when its process
    was killed), and its record when it is one of those: it is read again from nothing."""
    unread = "SELECT batch_id FROM batches WHERE batch_id = ? AND status IN ('ingesting', 'changed', 'vanished')"
    for table in ("measurements", "quarantine", "block_sources"):
        con.execute(f"DELETE FROM {table} WHERE batch_id IN ({unread})", [batch_id])
    con.execute(f"DELETE FROM batches WHERE batch_id IN ({unread})", [batch_id])


def batches(db: Db) -> pl.DataFrame:
    """Every batch, newest first, with the rows it still contributes."""
    return query(
        """
        SELECT b.batch_id, b.kind, coalesce(b.uarch, b.app) AS scope, b.status, b.n_read, b.n_ingested,
               b.n_quarantined, (SELECT count(*) FROM measurements m WHERE m.batch_id = b.batch_id)
                 + (SELECT count(*) FROM block_sources s WHERE s.batch_id = b.batch_id) AS n_rows_now,
               b.source_file, b.ingested_at, b.status_reason, b.status_at
        FROM batches b ORDER BY b.ingested_at DESC, b.batch_id
        """,
        db,
    )


def drop_batch(con: duckdb.DuckDBPyConnection, batch_id: str, reason: str) -> dict:
    """Withdraw a measurement batch: its measurements are deleted (each batch has
    its own rows), its row stays with status 'dropped' (so its bytes are never
    ingested again) and its quarantined lines stay. Blocks stay: other batches may
    share them. Corpus batches are not withdrawn: a later file of the same
    application may have supplied the same rows, which carry the first batch's id."""
    found = con.execute("SELECT kind, status FROM batches WHERE batch_id = ?", [batch_id]).fetchall()
    if not found:
        raise KeyError(f"no batch {batch_id!r} in the warehouse (see `difftune batches list`)")
    kind, status = found[0]
    if kind != "measurements":
        raise ValueError(f"batch {batch_id} is a {kind} batch: only measurement batches can be dropped")
    if status == "dropped":
        return {"batch_id": batch_id, "rows_removed": 0, "already_dropped": True}
    removed = scalar(con, "DELETE FROM measurements WHERE batch_id = ?", [batch_id])
    scalar(
        con,
        "UPDATE batches SET status = 'dropped', status_reason = ?, status_at = ? WHERE batch_id = ?",
        [reason, now(), batch_id],
    )
    forget_versions(con, "measurements")  # what was materialised from its rows is not up to date
    return {"batch_id": batch_id, "rows_removed": removed, "already_dropped": False}


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


def harness_recorded(db: Db, harness: str) -> set[str]:
    """Blocks whose accesses are recorded under harness model ``harness``."""
    return set(query("SELECT block_id FROM block_harness WHERE harness = ?", db, [harness])["block_id"].to_list())


def save_accesses(con: duckdb.DuckDBPyConnection, status: pl.DataFrame, accesses: pl.DataFrame) -> None:
    """Blocks' accesses and how their harness model fared (rows already there are kept)."""
    insert_new(con, "block_accesses", accesses, ["block_id", "harness", "seq"])
    insert_new(con, "block_harness", status, ["block_id", "harness"])


def harness_status(db: Db, harness: str, block_ids: list[str]) -> pl.DataFrame:
    return query(
        "SELECT block_id, addresses, status FROM block_harness WHERE harness = ? AND block_id IN (SELECT unnest(?))",
        db,
        [harness, block_ids],
    )


def harness_accesses(db: Db, harness: str, block_ids: list[str]) -> pl.DataFrame:
    return query(
        """
        SELECT block_id, iteration, instr, address, bytes, is_store FROM block_accesses
        WHERE harness = ? AND block_id IN (SELECT unnest(?)) ORDER BY block_id, seq
        """,
        db,
        [harness, block_ids],
    )


def harness_summary(db: Db, harness: str, block_ids: list[str]) -> dict:
    """Of ``block_ids``: how many ran under the harness model, how many fell back
    (the commonest reasons) and the emulation's mean cost."""
    frame = query(
        """
        SELECT addresses, regexp_replace(status, ' at instruction.*| \\(.*', '') AS reason, count(*) AS n,
               sum(seconds) AS seconds
        FROM block_harness WHERE harness = ? AND block_id IN (SELECT unnest(?)) GROUP BY ALL ORDER BY n DESC
        """,
        db,
        [harness, block_ids],
    )
    n = int(frame["n"].sum()) if frame.height else 0
    emulated = int(frame.filter(pl.col("addresses") == harness)["n"].sum()) if frame.height else 0
    return {
        "recorded": n,
        "emulated": emulated,
        "fallbacks": {r: int(c) for r, c in frame.filter(pl.col("reason") != "ok").select("reason", "n").iter_rows()},
        "ms_per_block": 1e3 * float(frame["seconds"].sum()) / n if n else 0.0,
    }


def aliasing_blocks(db: Db, harness: str) -> pl.DataFrame:
    """Blocks in which a load reads bytes a store of the block wrote (any
    iteration), under harness model ``harness``: (block_id, loads, stores) counts
    of the overlapping accesses."""
    return query(
        """
        SELECT l.block_id, count(DISTINCT l.seq) AS loads, count(DISTINCT s.seq) AS stores
        FROM block_accesses l JOIN block_accesses s
          ON l.block_id = s.block_id AND l.harness = s.harness AND s.is_store AND NOT l.is_store
         AND l.address < s.address + s.bytes AND s.address < l.address + l.bytes
        WHERE l.harness = ? GROUP BY l.block_id ORDER BY l.block_id
        """,
        db,
        [harness],
    )
