"""The record of each measurement batch (table batches): which reader holds
it, how its reading ended, and dropping it with what it added."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import polars as pl

from difftune_pipeline.warehouse.connection import Db, now, query, scalar
from difftune_pipeline.warehouse.versions import forget_versions

# A batch recorded in one of these states was never fully read (``ingesting`` when its
# reader died, ``changed``, ``vanished``); with those withdrawn because their file came to
# hold other bytes (``replaced``), their bytes, seen again, are read.
UNREAD = ("ingesting", "changed", "vanished")
READ_AGAIN = (*UNREAD, "replaced")


def settled(status: str | None) -> bool:
    """Whether a batch recorded with ``status`` is done with (``ok``, ``failed_sanity``,
    ``dropped``): its bytes are never read again. None: no record."""
    return status is not None and status not in READ_AGAIN


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


def stored_batch(con: duckdb.DuckDBPyConnection, batch_id: str) -> dict | None:
    """A batch's record (rows read, ingested, quarantined, status, the reader holding it
    while ``ingesting`` and when it last committed), or None."""
    rows = con.execute(
        "SELECT n_read, n_ingested, n_quarantined, status, owner, status_at FROM batches WHERE batch_id = ?",
        [batch_id],
    ).fetchall()
    keys = ("n_read", "n_ingested", "n_quarantined", "status", "owner", "status_at")
    return dict(zip(keys, rows[0])) if rows else None


@dataclass(frozen=True)
class BatchSource:
    """What a batch's record says of where its rows come from."""

    kind: str  # measurements | corpus
    uarch: str | None
    app: str | None
    source_file: str
    at: datetime  # when it was seen


def begin_batch(con: duckdb.DuckDBPyConnection, batch_id: str, source: BatchSource, owner: str) -> None:
    """The record of a batch whose rows ``owner`` adds, chunk by chunk: ``ingesting``,
    so that none of them is usable before its verdict (``finish_batch``)."""
    _insert_batch(con, batch_id, source, "ingesting", None, owner)


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


def replace_earlier(con: duckdb.DuckDBPyConnection, batch_id: str) -> list[tuple[str, int]]:
    """Withdraw the usable measurement batches read before from the file ``batch_id`` was
    read from (same path, same µarch): the file now holds other bytes, so its measurements
    are these, not both averaged. Each is ``replaced``, not ``dropped``: a file that goes
    back to its bytes has them read again (``forget_batch``). Returns (batch id, rows
    withdrawn) of each."""
    reason = f"replaced by batch {batch_id}: its file now holds other bytes"
    return [(old, _withdraw(con, old, "replaced", reason)) for old in _usable_of_its_file(con, batch_id)]


def newer_of_its_file(con: duckdb.DuckDBPyConnection, batch_id: str, since: datetime) -> str | None:
    """A usable measurement batch of the file ``batch_id`` was read from, made usable after
    ``since``, when its reading began: another reader's, of the bytes the file came to hold
    meanwhile (None: there is none)."""
    return next(iter(_usable_of_its_file(con, batch_id, since)), None)


def _usable_of_its_file(con: duckdb.DuckDBPyConnection, batch_id: str, since: datetime | None = None) -> list[str]:
    """The usable measurement batches, other than ``batch_id``, of the file it was read from
    (same path, same µarch), newest first; with ``since``, those made usable after it."""
    rows = con.execute(
        "SELECT o.batch_id FROM batches o JOIN batches n ON o.source_file = n.source_file AND o.uarch = n.uarch "
        "WHERE n.batch_id = ? AND n.kind = 'measurements' AND o.kind = 'measurements' AND o.status = 'ok' "
        "AND o.batch_id <> n.batch_id AND (?::TIMESTAMP IS NULL OR o.status_at > ?) "
        "ORDER BY o.status_at DESC, o.batch_id",
        [batch_id, since, since],
    ).fetchall()
    return [b for (b,) in rows]


def record_unread(con: duckdb.DuckDBPyConnection, batch_id: str, source: BatchSource, status: str, reason: str) -> None:
    """A batch that ingested nothing because its bytes were gone or changed when read
    (``status`` changed | vanished), with ``reason``."""
    _insert_batch(con, batch_id, source, status, reason, None)


def _insert_batch(con, batch_id: str, source: BatchSource, status: str, reason: str | None, owner: str | None) -> None:
    scalar(
        con,
        "INSERT INTO batches (batch_id, kind, uarch, app, source_file, n_read, n_ingested, n_quarantined, "
        "ingested_at, status, status_reason, status_at, owner) VALUES (?, ?, ?, ?, ?, 0, 0, 0, ?, ?, ?, ?, ?)",
        [
            batch_id,
            source.kind,
            source.uarch,
            source.app,
            source.source_file,
            source.at,
            status,
            reason,
            source.at,
            owner,
        ],
    )


def forget_batch(con: duckdb.DuckDBPyConnection, batch_id: str) -> None:
    """Whatever a batch whose bytes are to be read again added (``ingesting`` when its
    process was killed, or ``replaced``), and its record when it is one of those: it is
    read again from nothing."""
    unread = f"SELECT batch_id FROM batches WHERE batch_id = ? AND status IN {READ_AGAIN}"
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


def drop_batch(con: duckdb.DuckDBPyConnection, batch_id: str, reason: str, uarch: str | None = None) -> dict:
    """Withdraw a measurement batch: its measurements are deleted (each batch has
    its own rows), its row stays with status 'dropped' (so its bytes are never
    ingested again) and its quarantined lines stay. Blocks stay: other batches may
    share them. Corpus batches are not withdrawn: a later file of the same
    application may have supplied the same rows, which carry the first batch's id.
    ``uarch``: the µarch the caller named it by (an inbox partition's), which must be its own."""
    found = con.execute("SELECT kind, status, uarch FROM batches WHERE batch_id = ?", [batch_id]).fetchall()
    if not found:
        raise KeyError(f"no batch {batch_id!r} in the warehouse (see `difftune batches list`)")
    kind, status, own = found[0]
    if uarch is not None and uarch != own:
        raise KeyError(f"batch {batch_id} holds {own or 'no µarch'}'s measurements, not {uarch}'s: nothing dropped")
    if kind != "measurements":
        raise ValueError(f"batch {batch_id} is a {kind} batch: only measurement batches can be dropped")
    if status == "dropped":
        return {"batch_id": batch_id, "rows_removed": 0, "already_dropped": True}
    return {"batch_id": batch_id, "rows_removed": _withdraw(con, batch_id, "dropped", reason), "already_dropped": False}


def _withdraw(con: duckdb.DuckDBPyConnection, batch_id: str, status: str, reason: str) -> int:
    """A measurement batch's rows deleted and its record marked ``status`` with why;
    returns the rows deleted."""
    removed = scalar(con, "DELETE FROM measurements WHERE batch_id = ?", [batch_id])
    scalar(
        con,
        "UPDATE batches SET status = ?, status_reason = ?, status_at = ? WHERE batch_id = ?",
        [status, reason, now(), batch_id],
    )
    forget_versions(con, "measurements")  # what was materialised from its rows is not up to date
    return removed
