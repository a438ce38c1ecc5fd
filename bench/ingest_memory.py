"""Streaming ingestion: a measurement batch of 1× and 10× a given size ingested into
fresh warehouses, each in a process of its own, with its peak RSS and rows/s side
by side. Memory must be flat in the file's size: the two peaks within 20% of each
other and both under 1 GiB.

The file repeats BHive's measured blocks (the bundled ones, or ``--data``'s) with
their measurements, 1% of its lines garbage of several kinds, so every kind of row
passes through: read column-wise, quarantined, repeated.

    .venv/bin/python bench/ingest_memory.py [--mb 300] [--times 10] [--data ../shared/data]
"""

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import add_data_argument, bhive_rows

GARBAGE = ["zz41,100.0", "4889c8", "4889c8,-3", "4889c8,nan", "4889c8,1,2", "489,100", "\x00\x01binary", "4889c8,1e400"]
LIMIT = 1 << 30


def build(path: Path, megabytes: float, rows: list[tuple[str, float]]) -> int:
    """Lines of ``rows`` (1% garbage) until the file holds ``megabytes``; returns the lines written."""
    rng = random.Random(0)
    target, written, lines = megabytes * 1e6, 0, 0
    with open(path, "w") as fh:
        while written < target:
            out = []
            for _ in range(10_000):
                if rng.random() < 0.01:
                    out.append(rng.choice(GARBAGE))
                else:
                    hex_, cycles = rng.choice(rows)
                    out.append(f"{hex_},{cycles:.2f}")
            text = "\n".join(out) + "\n"
            fh.write(text)
            written += len(text)
            lines += len(out)
    return lines


def child(src: str, db: str) -> None:
    """Ingest ``src`` into ``db``; print what it did and this process's peak RSS."""
    from difftune_pipeline.engine import Engine
    from difftune_pipeline.ingest import batches as ingest

    engine = Engine("haswell")
    t0 = time.perf_counter()
    summary = ingest.ingest_measurements(src, "haswell", db, engine)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({**summary.as_dict(), "seconds": seconds, "peak_rss": peak}))


def measure(src: Path, db: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(src), str(db)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=300.0)
    parser.add_argument("--times", type=int, default=10)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--tmp", type=Path, default=None, help="where the files go (default: the system's)")
    add_data_argument(parser)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    rows = bhive_rows("haswell", None, args.data)
    results = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for scale in (1, args.times):
            src, db = Path(tmp) / f"batch-{scale}.csv", Path(tmp) / f"w-{scale}.duckdb"
            lines = build(src, args.mb * scale, rows)
            r = measure(src, db)
            results.append(r)
            print(
                f"{args.mb * scale:7.0f} MB, {lines:>11,} lines: ingested {r['n_ingested']:,}, quarantined "
                f"{r['n_quarantined']:,}, {r['status']}; {r['seconds']:.1f} s = {r['n_read'] / r['seconds']:,.0f} "
                f"rows/s; peak RSS {r['peak_rss'] / 2**20:,.0f} MiB"
            )
            assert r["n_ingested"] + r["n_quarantined"] == r["n_read"] == lines, "a line was lost"
            src.unlink()
            db.unlink()
    small, large = (r["peak_rss"] for r in results)
    ratio = large / small
    print(
        f"peak RSS {args.times}x / 1x: {ratio:.2f} (target within 20%: 0.80-1.20); "
        f"largest {max(small, large) / 2**20:,.0f} MiB (target under {LIMIT >> 20} MiB)"
    )


if __name__ == "__main__":
    main()
