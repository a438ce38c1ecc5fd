"""Opt-in steady-state fast-forward against full simulation, under llvm-mca's model
and under the CPU's extended model (BHive's harness addresses): speed-up, the share
of blocks whose Total Cycles and whose steady state come out exactly equal, and
the steady state's MAPE against BHive's measurements both ways (the search tunes
on the fast-forwarded steady state). With ``--warehouse``, one pass of the direct
search over its train blocks both ways, from LLVM's table: time, moves, val and test.

    .venv/bin/python bench/engine_fast_forward.py [--blocks N] [--mcpu haswell] [--data ../shared/data] \
        [--warehouse W.duckdb --profile full --budget 100000]
"""

import argparse
import dataclasses
import time

import numpy as np
from common import add_data_argument, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.steps import StepContext
from difftune_pipeline.tuners.direct import search


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=None)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--warehouse", help="also one search pass on this warehouse's train blocks")
    parser.add_argument("--profile", default="full", help="the profile the warehouse was built with")
    parser.add_argument("--budget", type=int, default=100_000, help="the search pass's simulations")
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    blocks_and_tables(engine, args)
    if args.warehouse:
        search_pass(engine, args)


def blocks_and_tables(engine: Engine, args) -> None:
    rows = bhive_rows(args.mcpu, args.blocks, args.data)
    blocks = engine.disassemble_many([h for h, _ in rows])
    measured = np.array([c for _, c in rows])
    llvm = engine.default_table(blocks)
    models = {
        "llvm-mca": (llvm, blocks),
        "extended": (
            llvm.with_model(extended.for_cpu(args.mcpu), "bhive"),
            [harness.accesses(b, "bhive").attach(b) for b in blocks],
        ),
    }
    print(f"{len(blocks)} blocks, -mcpu={args.mcpu}, {args.iterations} iterations, 2 threads")
    for name, (table, model_blocks) in models.items():
        engine.compile(table)
        t0 = time.perf_counter()
        full = engine.simulate(model_blocks, table, threads=2, iterations=args.iterations)
        t_full = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast = engine.simulate(model_blocks, table, threads=2, iterations=args.iterations, fast_forward=True)
        t_fast = time.perf_counter() - t0
        ok = full.ok & fast.ok
        n = int(ok.sum())
        total = np.mean(full.cycles[ok] == fast.cycles[ok])
        steady = np.mean(full.steady[ok] == fast.steady[ok])
        rel = np.abs(fast.steady[ok] - full.steady[ok]) / full.steady[ok]
        mape = [100 * np.mean(np.abs(r.steady[ok] - measured[ok]) / measured[ok]) for r in (full, fast)]
        print(
            f"{name:9s} {n} blocks: full {n / t_full:7.1f} blocks/s, fast-forward {n / t_fast:7.1f} blocks/s, "
            f"speed-up {t_full / t_fast:.2f}x; exactly equal: Total Cycles {100 * total:.2f}%, "
            f"steady state {100 * steady:.2f}% (max |difference| {100 * rel.max():.2f}%); "
            f"steady-state MAPE full {mape[0]:.3f}%, fast-forward {mape[1]:.3f}%"
        )


def search_pass(engine: Engine, args) -> None:
    settings = settings_for(args.profile)
    ctx = StepContext(args.warehouse, engine, settings)
    _, default = ctx.default_table()
    frame, train = ctx.blocks("train")
    blocks, measured = [train[b] for b in frame["block_id"]], frame["cycles_per_100"].to_numpy()
    found = []
    for fast_forward in (False, True):
        config = dataclasses.replace(settings.search, budget=args.budget, rounds=1, fast_forward=fast_forward)
        t0 = time.perf_counter()
        table, history = search(
            engine,
            blocks,
            measured,
            default,
            lambda t: ctx.score(t, "val")[0],
            config,
            log=lambda _: None,
            measure=settings.measure,
        )
        seconds = time.perf_counter() - t0
        val, test = ctx.score(table, "val")[0], ctx.score(table, "test")[0]
        found.append(table)
        print(
            f"search pass, {'fast-forward' if fast_forward else 'every iteration'}: {seconds:.1f} s, "
            f"{history[-1].get('moves', 0)} moves, {history[-1]['simulations']} simulations; "
            f"val {100 * val:.2f}%, test {100 * test:.2f}%"
        )
    print("the same table both ways" if found[0] == found[1] else "the tables differ")


if __name__ == "__main__":
    main()
