"""How many simulation workers one writer keeps busy, old path against new, on
the same rows, side by side in one run.

- **old**: every simulated row through the one DuckDB writer, ``insert_new`` of
  4,000-row transactions into a ``simulations`` table already holding
  ``--prefill`` rows (its ``NOT EXISTS`` anti-join slows as the table grows);
- **new**: each worker writes its chunk as a Parquet file (``ChunkWriter``: a
  cost of the worker, paid in parallel), and the one writer only records the
  chunks in ``simulation_chunks`` (holding the same ``--prefill`` rows' worth of
  chunks): every ``RECORD_EVERY`` seconds, the chunks that finished since, in
  one transaction after checking each file is there. A flush's cost is measured
  at several batch sizes and fitted (per transaction + per chunk).

One worker's production (pairs/s of the engine on one thread, the bundled
sample's blocks under sampled tables) gives the projection. At W workers the
old writer is asked for W x that rate (efficiency: what it sustains of it); the
new one records W x that rate x RECORD_EVERY / CHUNK chunks per flush, and keeps
up (100%) while a flush takes less than RECORD_EVERY.

    .venv/bin/python bench/simulation_writes.py [--prefill 5000000] [--data $BHIVE_DATA]
"""

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from common import add_data_argument, bhive_blocks

from difftune_pipeline.engine import Engine
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.steps.simulations import CHUNK, RECORD_EVERY
from difftune_pipeline.warehouse import insert_new, simulations, writer
from difftune_pipeline.warehouse.connection import connect
from difftune_pipeline.warehouse.simulation_files import Chunk, ChunkWriter, chunk_key, sizes

OLD_CHUNK = 4000  # rows per transaction of the old path
OLD_TABLE = """
    CREATE TABLE simulations (
        block_id VARCHAR NOT NULL, table_id VARCHAR NOT NULL, mcpu VARCHAR NOT NULL,
        llvm_version VARCHAR NOT NULL, iterations INTEGER NOT NULL, cycles BIGINT,
        status VARCHAR NOT NULL, shard VARCHAR NOT NULL, PRIMARY KEY (block_id, table_id, iterations))
"""
TABLE_ID = "perturb-0-haswell-0123456789abcdef"


def rows(n: int) -> pl.DataFrame:
    """``n`` simulated rows, as both paths store them."""
    return pl.DataFrame(
        {
            "block_id": [f"new{i:08d}" for i in range(n)],
            "table_id": TABLE_ID,
            "mcpu": "haswell",
            "llvm_version": "19",
            "iterations": 100,
            "cycles": np.arange(n, dtype=np.int64) % 5000 + 100,
            "status": "ok",
            "shard": "shard-0",
        },
        schema_overrides={"iterations": pl.Int32},
    )


def old_path(frame: pl.DataFrame, prefill: int, folder: Path) -> float:
    """Rows/s of the one writer inserting every row."""
    db = folder / "old.duckdb"
    con = connect(db)
    con.execute(OLD_TABLE)
    con.execute(
        "INSERT INTO simulations SELECT 'b' || (i % 300000), 't' || (i // 300000), 'haswell', '19', 100, "
        "i % 1000, 'ok', 'shard-0' FROM range(?) r(i)",
        [prefill],
    )
    con.close()
    t0 = time.perf_counter()
    for start in range(0, frame.height, OLD_CHUNK):
        with writer(db) as w:
            insert_new(w, "simulations", frame.slice(start, OLD_CHUNK), ["block_id", "table_id", "iterations"])
    return frame.height / (time.perf_counter() - t0)


def worker_files(frame: pl.DataFrame, folder: Path) -> tuple[list[dict], float]:
    """The chunks' records, and seconds per row a worker spends writing its chunks' files."""
    files = ChunkWriter(str(folder / "simulations"), str(folder / "new.duckdb"), "haswell", "19", 100, "shard-0")
    ids, cycles = frame["block_id"].to_list(), frame["cycles"].to_numpy()
    t0, records = time.perf_counter(), []
    for start in range(0, frame.height, CHUNK):
        piece = ids[start : start + CHUNK]
        chunk = Chunk(chunk_key("haswell", "19", 100, TABLE_ID, piece), TABLE_ID, piece)
        records.append(files(chunk, cycles[start : start + CHUNK], ["ok"] * len(piece)))
    return records, (time.perf_counter() - t0) / frame.height


def new_path(records: list[dict], prefill: int, batches: list[int], folder: Path) -> dict[int, float]:
    """Seconds the one writer takes to record ``b`` finished chunks, as the step does
    (each file's size checked as the step sees it, then one transaction), per batch size."""
    db = folder / "new.duckdb"
    con = connect(db)
    con.execute(
        "INSERT INTO simulation_chunks SELECT md5(i::VARCHAR), 'haswell', 't' || (i // 600), 100, 'shard-0', "
        "'simulations/haswell/shard-0/' || md5(i::VARCHAR) || '.parquet', ?, 0, 20000, md5(i::VARCHAR), "
        "now()::TIMESTAMP FROM range(?) r(i)",
        [CHUNK, prefill // CHUNK],
    )
    con.close()
    seconds = {}
    for b in batches:
        part = [{**r, "chunk_key": f"{r['chunk_key']}-{b}-{i}"} for i, r in enumerate(records[:b])]
        t0 = time.perf_counter()
        sizes(db, [r["file"] for r in part])
        with writer(db) as w:
            simulations.record_chunks(w, part)
        seconds[b] = time.perf_counter() - t0
    return seconds


def flush_seconds(seconds: dict[int, float], b: int) -> float:
    """A flush of ``b`` chunks: the measured cost per transaction and per chunk, fitted."""
    fixed, per_chunk = np.polyfit(list(seconds), list(seconds.values()), 1)[::-1]
    return max(fixed, 0.0) + per_chunk * b


def worker_rate(engine: Engine, blocks: list, pairs: int) -> float:
    """Pairs/s of one worker (the engine on one thread), the bundled blocks under sampled tables."""
    default = engine.default_table(blocks)
    space = ParamSpace.create({k for b in blocks for k in b.row_keys if k in default.rows}, engine)
    tables = [space.sampled_table("perturb", seed, default) for seed in range(2)]
    bidx = np.arange(pairs) % len(blocks)
    tidx = (np.arange(pairs) // len(blocks)) % len(tables)
    engine.simulate_pairs(blocks, tables, bidx[: len(blocks)], tidx[: len(blocks)], threads=1)  # compile, warm
    t0 = time.perf_counter()
    engine.simulate_pairs(blocks, tables, bidx, tidx, threads=1)
    return pairs / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000, help="rows both writers store, timed")
    parser.add_argument("--prefill", type=int, default=5_000_000, help="rows each store holds before")
    parser.add_argument("--blocks", type=int, default=500)
    parser.add_argument("--pairs", type=int, default=2000, help="pairs timed for one worker's rate")
    add_data_argument(parser)
    args = parser.parse_args()

    engine = Engine("haswell")
    per_worker = worker_rate(engine, [b for b in bhive_blocks(engine, args.blocks, args.data) if b.ok], args.pairs)
    frame = rows(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old = old_path(frame, args.prefill, folder)
        records, file_seconds = worker_files(frame, folder)
        flushes = new_path(records, args.prefill, [1, 16, 64, min(256, len(records))], folder)
    new_worker = 1 / (1 / per_worker + file_seconds)  # a worker simulates, then writes its chunk's file

    print(f"{args.rows:,} rows stored by each path; each store held {args.prefill:,} rows' worth before")
    print(f"one worker: {per_worker:,.0f} pairs/s simulated; {1e6 * file_seconds:.1f} µs per row to write")
    print(f"its chunks' Parquet files ({CHUNK} pairs each), so {new_worker:,.0f} pairs/s on the new path")
    print(f"old path: the writer inserts {old:,.0f} rows/s ({OLD_CHUNK:,}-row transactions)")
    print("new path: the writer records finished chunks every", RECORD_EVERY, "s; one flush of b chunks takes")
    for b, t in flushes.items():
        print(f"  b = {b:4d}: {1000 * t:7.1f} ms ({b * CHUNK / t:12,.0f} rows/s)")
    print(f"\n{'workers':>8} {'old efficiency':>15} {'chunks/flush':>13} {'flush (ms)':>11} {'new efficiency':>15}")
    for workers in (8, 21, 32, 64, 128, 256, 1024):
        b = math.ceil(workers * new_worker * RECORD_EVERY / CHUNK)
        t = flush_seconds(flushes, b)
        old_eff = min(1.0, old / (workers * per_worker))
        print(f"{workers:>8} {old_eff:15.0%} {b:13,} {1000 * t:11.0f} {min(1.0, RECORD_EVERY / t):15.0%}")
    print(f"old: writing limits above {old / per_worker:.0f} workers; new: above ", end="")
    # the largest worker count whose flush still fits in the flush interval
    fixed, per_chunk = np.polyfit(list(flushes), list(flushes.values()), 1)[::-1]
    print(f"{(RECORD_EVERY - max(fixed, 0.0)) / per_chunk * CHUNK / RECORD_EVERY / new_worker:,.0f} workers")


if __name__ == "__main__":
    main()
