"""Simulations per second on this process's threads and on Ray workers, side by
side on the same (block, sampled table) pairs (results must be identical); Ray's
overhead per task; and from those, a projection of the wall time of BHive's
full Haswell set (300,000 blocks x 64 tables) on 8, 32 and 128 workers (where
the recording of their chunks would limit them: bench/simulation_writes.py).

    .venv/bin/python bench/ray_scaling.py [--blocks 1000] [--tables 4] [--data ../shared/data]

Without ``RAY_ADDRESS`` Ray starts on this machine; with it, the Ray runs use
that cluster.
"""

import argparse
import time

import numpy as np
from common import add_data_argument, bhive_blocks

from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.ray_engine import RayEngine, WorkerPool
from difftune_pipeline.model.params import ParamSpace

FULL_PAIRS = 300_000 * 64


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def repeated(fn, calls: int, *args, **kwargs) -> float:
    """Milliseconds per call of ``fn(*args, **kwargs)``, called ``calls`` times one after another."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args, **kwargs)
    return 1000 * (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--mcpu", default="haswell")
    add_data_argument(parser)
    args = parser.parse_args()

    engine = Engine(args.mcpu)
    blocks = [b for b in bhive_blocks(engine, args.blocks, args.data) if b.ok]
    default = engine.default_table(blocks)
    space = ParamSpace.create({k for b in blocks for k in b.row_keys if k in default.rows}, engine)
    tables = [space.sampled_table("perturb", seed, default) for seed in range(args.tables)]
    n = len(blocks) * len(tables)
    bidx, tidx = np.tile(np.arange(len(blocks)), len(tables)), np.repeat(np.arange(len(tables)), len(blocks))
    print(f"{len(blocks)} blocks x {len(tables)} sampled tables = {n} pairs, -mcpu={args.mcpu}, 100 iterations")

    rates, results = {}, {}
    warm = slice(0, len(blocks))  # every block once (under the first table): first-use costs leave the timing
    for threads in (1, 2):
        engine.simulate_pairs(blocks, tables, bidx[warm], tidx[warm], threads=threads)
        name = f"threads x{threads}"
        results[name], t = timed(engine.simulate_pairs, blocks, tables, bidx, tidx, threads=threads)
        rates[name] = n / t
    import ray

    overhead, calls = {}, 300
    for workers in (1, 2):
        pool = WorkerPool(workers)
        on_ray = RayEngine(args.mcpu, pool)
        on_ray.simulate_pairs(blocks, tables, bidx[warm], tidx[warm])  # ships the blocks, compiles the tables
        results[f"ray x{workers}"], t = timed(on_ray.simulate_pairs, blocks, tables, bidx, tidx)
        rates[f"ray x{workers}"] = n / t
        if workers == 2:
            worker = pool.workers[0]
            overhead["empty task, one at a time (ms)"] = repeated(lambda w=worker: ray.get(w.where.remote()), calls)
            _, t = timed(ray.get, [w.where.remote() for _ in range(calls) for w in pool.workers])
            overhead["empty task, many in flight (ms)"] = 1000 * t / (calls * len(pool.workers))
            t_ray = repeated(on_ray.simulate_pairs, calls, blocks, tables, [0], [0])
            t_local = repeated(engine.simulate_pairs, calls, blocks, tables, [0], [0], threads=1)
            overhead["one-pair simulation, Ray minus in-process (ms)"] = t_ray - t_local
        pool.close()

    base = results["threads x1"]
    same = all(np.array_equal(r.cycles, base.cycles) and r.status == base.status for r in results.values())
    print(f"identical results on every path: {same}")
    print(f"{'path':<12} {'pairs/s':>9} {'vs threads x1':>14}")
    for name, rate in rates.items():
        print(f"{name:<12} {rate:9.1f} {rate / rates['threads x1']:13.2f}x")
    print(f"ray x2 / threads x2: {rates['ray x2'] / rates['threads x2']:.2f}")
    print(f"ray x2 / ray x1: {rates['ray x2'] / rates['ray x1']:.2f} (2 workers, 2 cores, the driver beside them)")
    for name, ms in overhead.items():
        print(f"Ray overhead, {name}: {ms:.2f}")

    per_worker = rates["ray x1"]
    print(f"\nprojection, {FULL_PAIRS:,} pairs (300,000 blocks x 64 tables), {per_worker:.0f} pairs/s per worker")
    print("(each worker writes its own chunks: bench/simulation_writes.py measures where recording them limits)")
    print(f"{'workers':>8} {'simulate (h)':>13}")
    for workers in (8, 32, 128):
        print(f"{workers:>8} {FULL_PAIRS / (per_worker * workers) / 3600:13.2f}")


if __name__ == "__main__":
    main()
