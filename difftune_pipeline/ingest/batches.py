"""Ingestion of measurement batches and corpus files into the warehouse.

A file is a batch identified by the hash of its bytes and its scope (the µarch
measured and the unit when it is not BHive's, or the application), so
re-ingesting it adds nothing. Every input line ends up either ingested or
quarantined with a reason a user can read (table ``quarantine``); none is dropped.
A file is read in chunks (``reader``), so memory does not grow with its size, and
what is ingested is exactly the bytes hashed: a file rewritten while it is read
leaves nothing behind but its batch's record, ``changed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from difftune_pipeline.engine import CPUS, LLVM_VERSION, Engine
from difftune_pipeline.ingest import owner, reader, sanity
from difftune_pipeline.ingest.blocks import block_id, disassemble_rows, split_of
from difftune_pipeline.ingest.rows import GOOD, THROUGHPUT_BOUNDS, measurement_rows, split_rows
from difftune_pipeline.warehouse import batch_state, connection, ingestion, insert_new, writer

UNITS = {"cycles_per_100": 1.0, "cycles_per_iteration": 100.0}


@dataclass
class BatchSummary:
    batch_id: str
    kind: str
    source_file: str
    n_read: int
    n_ingested: int
    n_quarantined: int
    already_ingested: bool = False
    status: str = "ok"  # ok | failed_sanity | dropped | replaced | changed | vanished (ingesting while it is read)
    note: str | None = None  # one line for the user: why nothing was ingested, or what it replaced

    def as_dict(self) -> dict:
        return asdict(self)


def file_batch_id(path: Path, scope: str) -> str:
    """Hash of the file's bytes within its scope (the µarch or the application)."""
    digest = reader.batch_digest(scope)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(reader.BLOCK), b""):
            digest.update(chunk)
    return reader.batch_id_of(digest)


def _ingest_blocks(con, engine: Engine, hexes: list[str]) -> dict[str, str | None]:
    """Disassemble the blocks not yet in the warehouse; returns hex -> quarantine reason."""
    reasons = ingestion.known_blocks(con, hexes)
    new = [h for h in dict.fromkeys(hexes) if h not in reasons]
    if new:
        rows = disassemble_rows(engine, new)
        insert_new(con, "blocks", rows, ["block_id"])
        reasons.update(zip(rows["hex"].to_list(), rows["reason"].to_list()))
    return reasons


def batch_scope(kind: str, uarch: str | None = None, app: str | None = None, unit: str = "cycles_per_100") -> str:
    """What a batch's bytes mean: the same bytes in another unit are another batch."""
    return f"{kind}:{uarch or app}" + ("" if unit == "cycles_per_100" else f":{unit}")


@dataclass
class _Batch:
    """What ingesting one file needs, and what it counted so far. Its path is absolute:
    a file named from another folder is the same file (its rewrite replaces its batch)."""

    path: Path
    kind: str
    uarch: str | None
    app: str | None
    unit: str
    at: datetime
    n_ingested: int = 0
    n_quarantined: int = 0

    def __post_init__(self) -> None:
        self.path = self.path.absolute()

    @property
    def scope(self) -> str:
        return batch_scope(self.kind, self.uarch, self.app, self.unit)

    def source(self, source_file: str) -> batch_state.BatchSource:
        return batch_state.BatchSource(self.kind, self.uarch, self.app, source_file, self.at)


# What DuckDB may hold while a batch is ingested: a chunk's rows, the blocks it looks up,
# the sanity check's scan of the batch (it spills beyond this).
INGEST_MEMORY = "128MB"


def _ingest(batch: _Batch, db: Path, engine: Engine, expected: str | None = None) -> BatchSummary:
    """Ingest ``batch.path`` as the batch its bytes hash to (``expected``: the batch a
    caller found, e.g. an inbox partition). The file is read once, a chunk per
    transaction (a transaction's uncommitted rows are held in memory) under a batch
    record ``ingesting`` that names its reader (``owner``), which no reader of
    ``usable_measurements`` sees; when the bytes read hash to the batch, its verdict
    makes it usable in one transaction, and when they do not (the file was rewritten
    meanwhile), or another reader made a batch of the same file usable since this one
    began (its bytes are newer), its rows are removed and it is recorded ``changed``. A batch left
    ``ingesting`` by a reader that died is read again; one another reader holds is left to it."""
    source = str(batch.path)
    expected = expected or file_batch_id(batch.path, batch.scope)
    with owner.reading() as me:
        with writer(db, INGEST_MEMORY) as con:
            done = batch_state.stored_batch(con, expected)
            status = done["status"] if done else None
            if batch_state.settled(status):
                counts = (done["n_read"], done["n_ingested"], done["n_quarantined"])
                return BatchSummary(expected, batch.kind, source, *counts, already_ingested=True, status=status)
            if status == "ingesting" and not owner.abandoned(done["owner"], done["status_at"], connection.now()):
                note = f"batch {expected} is being ingested by {owner.describe(done['owner'])}: left to it"
                return BatchSummary(expected, batch.kind, source, 0, 0, 0, status=status, note=note)
            batch_state.forget_batch(con, expected)  # a record of bytes never read, or a dead reader's rows
            batch_state.begin_batch(con, expected, batch.source(source), me)
        try:
            n_read = _read(batch, db, engine, expected, me)
            with writer(db, INGEST_MEMORY) as con:
                problems = []
                if batch.kind == "measurements":  # judged before it is usable: never usable unjudged
                    implausible, median = ingestion.ipc_figures(con, expected, sanity.MAX_IPC)
                    problems = sanity.problems(
                        source, n_read, batch.n_ingested, batch.n_quarantined, implausible, median
                    )
                counts = (n_read, batch.n_ingested, batch.n_quarantined)
                finished = batch_state.finish_batch(con, expected, me, counts, problems, connection.now())
                if finished and (newer := batch_state.newer_of_its_file(con, expected, batch.at)) is not None:
                    raise reader.FileChanged(  # undoes the verdict: bytes older than the file's never replace them
                        f"{source} was ingested as batch {newer} while this reading of it went on: its bytes "
                        f"are newer than batch {expected}'s, of which nothing was kept"
                    )
                # usable in the same transaction as the earlier bytes of its file are withdrawn
                replaced = batch_state.replace_earlier(con, expected) if finished and not problems else []
        except reader.FileChanged as exc:
            return record_unread(db, expected, batch, exc.status, str(exc), me)
        except _Superseded:
            return _superseded(db, expected, batch)
        if not finished:
            return _superseded(db, expected, batch)
        note = "; ".join(
            f"{source} was ingested before as batch {old}, whose {rows} measurements this batch replaces"
            for old, rows in replaced
        )
        status = "failed_sanity" if problems else "ok"
        return BatchSummary(expected, batch.kind, source, *counts, status=status, note=note or None)


class _Superseded(Exception):
    """The batch being read was dropped, or taken over by another reader."""


def _read(batch: _Batch, db: Path, engine: Engine, batch_id: str, me: str) -> int:
    """The file's lines into the warehouse, a chunk per transaction, each committed only
    while ``me`` holds the batch; returns the lines read. ``FileChanged`` when the bytes
    read are not the batch's, ``_Superseded`` when ``me`` no longer holds it."""
    lines = reader.NumberedLines(batch.path, batch.scope)
    n_read, first_seen = 0, {} if batch.kind == "corpus" else None
    for chunk in lines.chunks():
        n_read += len(chunk)
        with writer(db, INGEST_MEMORY) as con:
            if not batch_state.claim(con, batch_id, me):
                raise _Superseded
            _ingest_chunk(con, engine, batch, batch_id, chunk, first_seen)
    if lines.batch_id != batch_id:
        raise reader.FileChanged(
            f"{batch.path} changed while it was read (its bytes no longer hash to batch {batch_id}): "
            "nothing of it was kept; its new bytes are a batch of their own"
        )
    return n_read


def _superseded(db: Path, batch_id: str, batch: _Batch) -> BatchSummary:
    with writer(db) as con:
        status = (batch_state.stored_batch(con, batch_id) or {}).get("status", "dropped")
    note = f"batch {batch_id} was dropped or taken over by another reader while it was read: this reading stopped"
    return BatchSummary(batch_id, batch.kind, str(batch.path), 0, 0, 0, status=status, note=note)


def record_unread(
    db: Path, batch_id: str, batch: _Batch, status: str, note: str, me: str | None = None
) -> BatchSummary:
    """A batch whose bytes could not be read as they were hashed: whatever it added
    is removed and it is recorded with why, so that it blocks nothing, a user sees
    it (and may drop it), and its bytes, seen again, are ingested. A batch that is no
    longer ``me``'s to record (dropped, ingested, or read by another) is left as it is."""
    with writer(db) as con:
        done = batch_state.stored_batch(con, batch_id)
        if done is not None and (done["status"] not in batch_state.UNREAD or done["owner"] not in (None, me)):
            return BatchSummary(batch_id, batch.kind, str(batch.path), 0, 0, 0, status=done["status"], note=note)
        batch_state.forget_batch(con, batch_id)
        batch_state.record_unread(con, batch_id, batch.source(str(batch.path)), status, note)
    return BatchSummary(batch_id, batch.kind, str(batch.path), 0, 0, 0, status=status, note=note)


def _ingest_chunk(con, engine: Engine, batch: _Batch, batch_id: str, chunk, first_seen: dict | None) -> None:
    """One chunk of a file's lines: its good rows as measurements (or block sources),
    its bad ones in ``quarantine`` with their reasons."""
    scale = UNITS[batch.unit]
    if batch.kind == "measurements":
        good, bad = measurement_rows(chunk, tuple(b / scale for b in THROUGHPUT_BOUNDS))
    else:
        rows, bad = split_rows(chunk, "frequency", True, first_seen)
        good = pl.DataFrame([(n, h, v) for n, _, h, v in rows], schema=GOOD, orient="row")
    raw = dict(chunk)
    hexes = good["hex"].unique().to_list()
    reasons = _ingest_blocks(con, engine, hexes)
    ids = pl.DataFrame(
        {"hex": hexes, "block_id": [block_id(h) for h in hexes], "reason": [reasons[h] for h in hexes]},
        schema={"hex": pl.Utf8, "block_id": pl.Utf8, "reason": pl.Utf8},
    )
    good = good.join(ids, on="hex", how="left")
    undecodable = good.filter(pl.col("reason").is_not_null())
    bad += [(n, raw[n], why) for n, why in undecodable.select("line_no", "reason").iter_rows()]
    kept = good.filter(pl.col("reason").is_null())
    if batch.kind == "measurements":
        rows = kept.select("line_no", "block_id", cycles_per_100=pl.col("value") * scale)
        batch.n_ingested += ingestion.add_measurements(con, batch_id, str(batch.path), batch.uarch, rows, batch.at)
    else:
        pairs = kept.select("block_id", frequency="value")
        ingestion.add_block_sources(con, batch_id, batch.app, pairs)
        batch.n_ingested += kept.height
    batch.n_quarantined += ingestion.add_quarantine(con, batch_id, str(batch.path), sorted(bad), batch.at)


def ingest_measurements(
    path: str | Path,
    uarch: str,
    db: str | Path,
    engine: Engine,
    unit: str = "cycles_per_100",
    batch_id: str | None = None,
) -> BatchSummary:
    """A BHive-format file ``hex,throughput`` of one µarch; ``unit`` names the throughput's
    unit, ``batch_id`` the batch its bytes were found to be (else they are hashed first)."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; one of {sorted(UNITS)}")
    if uarch not in CPUS:
        raise ValueError(f"measurements of {uarch!r}: not a CPU LLVM {LLVM_VERSION} models")
    batch = _Batch(Path(path), "measurements", uarch, None, unit, connection.now())
    return _ingest(batch, Path(db), engine, batch_id)


def record_missing(db: str | Path, batch_id: str, uarch: str, source: str) -> BatchSummary:
    """A measurement batch whose bytes no file has any more (it was deleted or
    rewritten before it was read), recorded ``vanished`` with why."""
    batch = _Batch(Path(source), "measurements", uarch, None, "cycles_per_100", connection.now())
    note = f"no file has the bytes of batch {batch_id} any more (was {source}; deleted or rewritten before it was read)"
    return record_unread(Path(db), batch_id, batch, "vanished", f"{note}: nothing of it was kept")


def ingest_corpus(path: str | Path, db: str | Path, engine: Engine, app: str | None = None) -> BatchSummary:
    """A BHive corpus file ``hex,frequency``; the application defaults to the file's stem."""
    path = Path(path)
    batch = _Batch(path, "corpus", None, app or path.name.removesuffix(".csv"), "cycles_per_100", connection.now())
    return _ingest(batch, Path(db), engine)


def assign_splits(db: str | Path) -> dict[str, int]:
    """Give every block without a split its hash-determined one; returns the counts."""
    with writer(db) as con:
        missing = ingestion.blocks_without_split(con)
        frame = pl.DataFrame(
            {"block_id": missing, "split": [split_of(b) for b in missing]},
            schema={"block_id": pl.Utf8, "split": pl.Utf8},
        )
        insert_new(con, "splits", frame, ["block_id"])
        return ingestion.split_counts(con)
