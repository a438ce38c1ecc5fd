"""Peak memory of the surrogate step as the simulated pairs grow: the step on a
warehouse's pairs (1x), and on k times as many (the same blocks under k times as
many sampled tables), each in a fresh process, side by side in one run.

The extra tables' rows are copies of the stored ones under new table ids (their
parameter values are regenerated from their own seeds, so the pairs are not
real simulations): what is measured is memory against the number of pairs, not
the surrogate's fidelity. Training is one epoch, so the runs stay short.

    .venv/bin/python bench/surrogate_memory.py --warehouse W [--uarch haswell] [--times 1 4]

W is a warehouse the ``full`` profile materialised (``simulations`` and
``sampled_tables`` done); it is copied, never written.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.steps.context import StepContext
from difftune_pipeline.warehouse import simulation_files, simulations, tables, writer

CHILD = """
import json, resource, sys, time
from difftune_pipeline import steps
from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine
db, uarch, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t0 = time.perf_counter()
out = steps.train_surrogate(steps.StepContext(db, Engine(uarch), settings_for("full", overrides)), log=lambda *_: None)
print(json.dumps({"pairs": out.n_train + out.n_heldout, "seconds": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def settings(per_preset: int) -> dict:
    return {"tables_per_preset": per_preset, "structured.epochs": 1}


def grown(source: Path, folder: Path, uarch: str, times: int) -> Path:
    """A copy of the warehouse whose every sampled table has ``times - 1`` copies under new seeds."""
    db = folder / "w.duckdb"
    shutil.copy(source, db)
    if (source.parent / "simulations").exists():  # an older warehouse has them inside: migrated on first use
        shutil.copytree(source.parent / "simulations", folder / "simulations")
    full = settings_for("full")
    ctx = StepContext(str(db), Engine(uarch), settings_for("full", settings(full.tables_per_preset * times)))
    space, _, _ = ctx.space()
    stored = StepContext(str(db), ctx.engine, full).sampled_tables(space)
    by_seed = {(t.preset, t.seed): t for t in stored}
    extra = [t for t in ctx.sampled_tables(space) if (t.preset, t.seed) not in by_seed]
    for t in extra:
        like = by_seed[t.preset, t.seed % full.tables_per_preset]
        rows = simulation_files.dataset(db, simulations.chunk_files(db, [like.table_id])).to_table()
        rows = rows.set_column(rows.schema.get_field_index("table_id"), "table_id", pa.array([t.table_id] * len(rows)))
        files = simulation_files.ChunkWriter(
            ctx.simulation_root, str(db), uarch, ctx.engine.llvm_version, full.iterations, "shard-copies"
        )
        key = simulation_files.chunk_key(uarch, "copy", full.iterations, t.table_id, [])
        record = files.write(key, t.table_id, rows)
        with writer(db) as con:
            tables.save_sampled(con, t.table_id, uarch, ctx.engine.llvm_version, t.preset, t.seed, space.fingerprint())
            simulations.record_chunks(con, [record])
    return db


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--uarch", default="haswell")
    parser.add_argument("--times", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    per_preset = settings_for("full").tables_per_preset
    results = {}
    for times in args.times:
        with tempfile.TemporaryDirectory(prefix="surrogate-memory-") as tmp:
            db = grown(args.warehouse.resolve(), Path(tmp), args.uarch, times)
            run = subprocess.run(
                [sys.executable, "-c", CHILD, str(db), args.uarch, json.dumps(settings(per_preset * times))],
                capture_output=True,
                text=True,
            )
            if run.returncode:
                raise SystemExit(f"the surrogate step failed at {times}x:\n{run.stderr[-3000:]}")
            results[times] = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"{'pairs':>10} {'x':>4} {'peak RSS (MB)':>14} {'vs 1x':>7} {'seconds':>8}")
    base = results[args.times[0]]["peak_rss_mb"]
    for times, r in results.items():
        rss = r["peak_rss_mb"]
        print(f"{r['pairs']:>10,} {times:>4} {rss:14.0f} {rss / base - 1:+7.1%} {r['seconds']:8.0f}")


if __name__ == "__main__":
    main()
