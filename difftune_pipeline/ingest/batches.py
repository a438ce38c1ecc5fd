"""Ingestion of measurement batches and corpus files into the warehouse.

A file is a batch identified by the hash of its bytes and its scope (the µarch
measured and the unit when it is not BHive's, or the application), so
re-ingesting it adds nothing. Every input line ends up either ingested or
quarantined with a reason a user can read (table ``quarantine``); none is dropped.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from difftune_pipeline.engine import CPUS, LLVM_VERSION, Engine
from difftune_pipeline.ingest import sanity
from difftune_pipeline.ingest.blocks import block_id, canonical_hex, disassemble_rows, hex_problem, split_of
from difftune_pipeline.warehouse import connection, ingestion, insert_new, writer

UNITS = {"cycles_per_100": 1.0, "cycles_per_iteration": 100.0}
# A measured throughput is within these bounds (cycles per 100 iterations): a million
# cycles per iteration is ~800x the slowest BHive block (127,761 per 100 on Haswell);
# one cycle per 100 iterations is ~20x faster than the fastest one-instruction block.
THROUGHPUT_BOUNDS = (1.0, 1e8)
# A plain decimal number in ASCII (float() would also take "1_000" and other scripts' digits).
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


@dataclass
class BatchSummary:
    batch_id: str
    kind: str
    source_file: str
    n_read: int
    n_ingested: int
    n_quarantined: int
    already_ingested: bool = False
    status: str = "ok"  # ok | failed_sanity | dropped

    def as_dict(self) -> dict:
        return asdict(self)


def file_batch_id(path: Path, scope: str) -> str:
    """Hash of the file's bytes within its scope (the µarch or the application)."""
    digest = hashlib.sha256(scope.encode() + b"\0")
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _lines(path: Path) -> list[tuple[int, str]]:
    """Numbered non-blank lines; only \\n ends a line (a stray \\r is data), a byte-order mark is not data."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="\n") as fh:
        return [(i, line.rstrip("\r\n")) for i, line in enumerate(fh, start=1) if line.strip()]


def parse_number(
    text: str, what: str, zero_ok: bool = False, bounds: tuple[float, float] = (0.0, math.inf)
) -> tuple[float | None, str | None]:
    """(value, None), or (None, why ``text`` is not a number of ``what`` within ``bounds``)."""
    if NUMBER.fullmatch(text) is None:
        special = text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity")
        return None, f"{what} {text!r} is {'not finite' if special else 'not a number'}"
    value = float(text)
    if not math.isfinite(value):
        return None, f"{what} {text!r} is not finite"
    if value < 0 or (value == 0 and not zero_ok):
        return None, f"{what} must be {'non-negative' if zero_ok else 'positive'}, got {text!r}"
    least, most = bounds
    if value > most or 0 < value < least:
        return None, f"{what} {text!r} is outside {least:g}..{most:g}: not a basic block's throughput"
    return value, None


def _split_rows(lines, what: str, zero_ok: bool, repeats_ok: bool, bounds: tuple[float, float] = (0.0, math.inf)):
    """(line_no, raw, hex, value) of well-formed rows, and (line_no, raw, reason) of
    the rest. ``repeats_ok``: a block listed again is a repeated measurement (kept;
    the tuning uses the mean), not a duplicate."""
    good, bad, first_seen = [], [], {}
    for line_no, raw in lines:
        fields = raw.split(",")
        if len(fields) != 2:
            bad.append((line_no, raw, f"expected 2 comma-separated fields 'hex,{what}', got {len(fields)}"))
            continue
        hex_ = canonical_hex(fields[0])
        problem = hex_problem(hex_)
        if problem:
            bad.append((line_no, raw, problem))
            continue
        value, problem = parse_number(fields[1].strip(), what, zero_ok, bounds)
        if problem:
            bad.append((line_no, raw, problem))
            continue
        if hex_ in first_seen and not repeats_ok:
            prev_line, prev_value = first_seen[hex_]
            reason = (
                f"duplicate of line {prev_line}"
                if value == prev_value
                else f"conflicts with line {prev_line} ({what} {prev_value:g} vs {value:g})"
            )
            bad.append((line_no, raw, reason))
            continue
        first_seen.setdefault(hex_, (line_no, value))
        good.append((line_no, raw, hex_, value))
    return good, bad


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


def _ingest(
    path: Path,
    kind: str,
    db: Path,
    engine: Engine,
    *,
    uarch: str | None = None,
    app: str | None = None,
    unit: str = "cycles_per_100",
) -> BatchSummary:
    path = Path(path)
    scale = UNITS[unit]
    batch = file_batch_id(path, batch_scope(kind, uarch, app, unit))
    now = connection.now()
    with writer(db) as con:
        done = ingestion.stored_batch(con, batch)
        if done:
            *counts, status = done
            return BatchSummary(batch, kind, str(path), *counts, already_ingested=True, status=status)
        lines = _lines(path)
        what = "cycles" if kind == "measurements" else "frequency"
        bounds = tuple(b / scale for b in THROUGHPUT_BOUNDS) if kind == "measurements" else (0.0, math.inf)
        good, bad = _split_rows(lines, what, zero_ok=kind == "corpus", repeats_ok=kind == "measurements", bounds=bounds)
        reasons = _ingest_blocks(con, engine, [h for _, _, h, _ in good])
        kept = []
        for line_no, raw, hex_, value in good:
            if reasons[hex_]:
                bad.append((line_no, raw, reasons[hex_]))
            else:
                kept.append((line_no, hex_, value))
        if kind == "measurements":
            rows = [(n, block_id(h), v * scale) for n, h, v in kept]
            ingestion.add_measurements(con, batch, str(path), uarch, rows, now)
        else:
            ingestion.add_block_sources(con, batch, app, [(block_id(h), v) for _, h, v in kept])
        ingestion.add_quarantine(con, batch, str(path), bad, now)
        problems = []
        if kind == "measurements":  # judged before it commits: never usable unjudged
            implausible = ingestion.implausible_measurements(con, batch, sanity.MAX_IPC)
            problems = sanity.problems(str(path), len(lines), len(kept), len(bad), implausible)
        ingestion.record_batch(con, batch, kind, uarch, app, str(path), len(lines), len(kept), len(bad), now, problems)
        status = "failed_sanity" if problems else "ok"
        return BatchSummary(batch, kind, str(path), len(lines), len(kept), len(bad), status=status)


def ingest_measurements(
    path: str | Path, uarch: str, db: str | Path, engine: Engine, unit: str = "cycles_per_100"
) -> BatchSummary:
    """A BHive-format file ``hex,throughput`` of one µarch; ``unit`` names the throughput's unit."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; one of {sorted(UNITS)}")
    if uarch not in CPUS:
        raise ValueError(f"measurements of {uarch!r}: not a CPU LLVM {LLVM_VERSION} models")
    return _ingest(Path(path), "measurements", Path(db), engine, uarch=uarch, unit=unit)


def ingest_corpus(path: str | Path, db: str | Path, engine: Engine, app: str | None = None) -> BatchSummary:
    """A BHive corpus file ``hex,frequency``; the application defaults to the file's stem."""
    path = Path(path)
    return _ingest(path, "corpus", Path(db), engine, app=app or path.name.removesuffix(".csv"))


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
