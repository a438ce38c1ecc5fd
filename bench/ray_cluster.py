"""A Ray cluster of two nodes on this machine (``ray start --head`` and a second
``ray start --address``, one CPU each) simulates one shard of the ``full``
profile; the threads path simulates the same shard into another warehouse,
and the two must hold identical rows.

    .venv/bin/python bench/ray_cluster.py [--data ../shared/data] [--mcpu haswell] [--shard 0]

Without ``--data`` it runs on the bundled sample. It stops every Ray process of
this user on this machine when it ends (``ray stop``).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import GROUND_TRUTH, add_data_argument

from difftune_pipeline import steps
from difftune_pipeline.config import SAMPLE_DIR, settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.ray_engine import RayEngine, WorkerPool
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.warehouse import query

RAY = str(Path(sys.executable).with_name("ray"))
PORT = 6391


def ray_cli(*args: str) -> None:
    subprocess.run([RAY, *args], check=True, capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""})


def warehouse(db: Path, measured: Path, mcpu: str, engine) -> None:
    ingest.ingest_measurements(measured, mcpu, db, engine)
    ingest.assign_splits(db)


def rows(db: Path) -> list:
    return query("SELECT block_id, table_id, cycles, status FROM simulations ORDER BY ALL", db).rows()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--shard", type=int, default=0)
    add_data_argument(parser)
    args = parser.parse_args()
    measured = SAMPLE_DIR / "bhive_hsw_sample.csv"
    if args.data is not None:
        measured = args.data / "ground_truth" / GROUND_TRUTH[args.mcpu]
    settings = settings_for("full")
    ray_cli("stop", "--force")
    ray_cli("start", "--head", f"--port={PORT}", "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats")
    ray_cli("start", f"--address=127.0.0.1:{PORT}", "--num-cpus=1", "--disable-usage-stats")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            engine = Engine(args.mcpu)
            on_threads, on_ray = Path(tmp) / "threads.duckdb", Path(tmp) / "ray.duckdb"
            for db in (on_threads, on_ray):
                warehouse(db, measured, args.mcpu, engine)
            pool = WorkerPool(2, f"127.0.0.1:{PORT}")
            import ray

            nodes = [n for n in ray.nodes() if n["Alive"]]
            placed = pool.where()
            print(f"cluster: {len(nodes)} nodes, {ray.cluster_resources().get('CPU')} CPUs")
            print(f"workers (node, pid): {[(node[:8], pid) for node, pid in placed]}")
            print(f"workers on distinct nodes: {len({node for node, _ in placed})}")
            results = {}
            for name, db, eng in (("threads", on_threads, engine), ("ray", on_ray, RayEngine(args.mcpu, pool))):
                ctx = steps.StepContext(str(db), eng, settings)
                steps.sampled_tables(ctx)
                t0 = time.perf_counter()
                out = steps.simulate_shard(ctx, args.shard)
                results[name] = out, time.perf_counter() - t0
            for name, (out, seconds) in results.items():
                print(
                    f"{name:<8} shard {args.shard}: {out.simulated} pairs of {out.planned} "
                    f"({out.tables} tables) in {seconds:.1f} s = {out.simulated / seconds:.1f} pairs/s"
                )
            ours = rows(on_ray)
            print(f"identical rows (block, table, cycles, status): {rows(on_threads) == ours} ({len(ours)} rows)")
            print(f"ray / threads: {results['threads'][1] / results['ray'][1]:.2f}x the pairs/s")
            print(f"Ray tasks: {pool.tasks}")
    finally:
        import ray

        ray.shutdown()  # leave the cluster before it stops
        ray_cli("stop", "--force")


if __name__ == "__main__":
    main()
