"""Opt-in steady-state fast-forward against full simulation, under llvm-mca's model
and under the CPU's extended model (BHive's harness addresses): speed-up, the share
of blocks whose Total Cycles and whose steady state come out exactly equal, and
the steady state's MAPE against BHive's measurements both ways (the search tunes
on the fast-forwarded steady state).

    .venv/bin/python bench/engine_fast_forward.py [--blocks N] [--mcpu haswell] [--data ../shared/data]
"""

import argparse
import time

import numpy as np
from common import add_data_argument, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, extended


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=None)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--iterations", type=int, default=100)
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
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


if __name__ == "__main__":
    main()
