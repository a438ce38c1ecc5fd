"""Ingest throughput: a 300,000-row measurement file built from the BHive corpus.

Distinct blocks come from the corpus (125k) and variants of them with a trailing
1- or 2-byte nop, so every row is a distinct block that LLVM must disassemble.
Target: at most 60 s on 2 cores.

    .venv/bin/python bench/ingest_throughput.py [--rows 300000] [--data ../shared/data]
"""

import argparse
import random
import tempfile
import time
from pathlib import Path

from common import add_data_argument, corpus_files

from difftune_pipeline.engine import Engine
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.warehouse import connection


def build_file(path: Path, rows: int, data: Path | None) -> int:
    """Write up to ``rows`` distinct blocks; returns how many (the corpus bounds it)."""
    hexes = {}
    for f in corpus_files(data):
        for line in open(f):
            hexes.setdefault(line.split(",")[0], None)
    base = list(hexes)
    candidates = base + [h + "90" for h in base] + [h + "6690" for h in base]
    rng = random.Random(0)
    picked = rng.sample(candidates, min(rows, len(candidates)))
    with open(path, "w") as fh:
        for h in picked:
            fh.write(f"{h},{rng.uniform(20, 2000):.2f}\n")
    return len(picked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300_000)
    add_data_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, db = Path(tmp) / "batch.csv", Path(tmp) / "w.duckdb"
        rows = build_file(src, args.rows, args.data)
        if rows < args.rows:
            print(
                f"the corpus gives {rows} distinct blocks, not {args.rows}: pass --data ../shared/data for the full set"
            )
        engine = Engine("haswell")
        t0 = time.perf_counter()
        summary = ingest.ingest_measurements(src, "haswell", db, engine)
        splits = ingest.assign_splits(db)
        elapsed = time.perf_counter() - t0
        t1 = time.perf_counter()
        again = ingest.ingest_measurements(src, "haswell", db, engine)
        reingest = time.perf_counter() - t1
        blocks = connection.row_count(db, "blocks")
    print(
        f"rows read {summary.n_read}, ingested {summary.n_ingested}, quarantined {summary.n_quarantined}, "
        f"blocks {blocks}, splits {splits}"
    )
    print(f"ingest + splits: {elapsed:.1f} s = {summary.n_read / elapsed:,.0f} rows/s (target: <= 60 s)")
    print(f"re-ingest of the same file: {reingest:.2f} s, already ingested: {again.already_ingested}")


if __name__ == "__main__":
    main()
