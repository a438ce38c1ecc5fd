"""The extended model against llvm-mca's on the same BHive blocks, side by side:
simulations per second (every mechanism on, BHive's harness), the emulation's
cost per block and how many blocks it runs, and each model's default-table error
(MAPE and mean signed error, all blocks and those llvm-mca runs above 16
bytes a cycle).

    .venv/bin/python bench/extended_model.py [--mcpu haswell] [--blocks 2000] [--data ../shared/data]
"""

import argparse
import collections
import time

import numpy as np
from common import add_data_argument, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.extended import EXTENDED


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=2000)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--threads", type=int, default=2)
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    rows = bhive_rows(args.mcpu, args.blocks, args.data)
    blocks = engine.disassemble_many([h for h, _ in rows])
    keep = [i for i, b in enumerate(blocks) if b.ok]
    blocks, measured = [blocks[i] for i in keep], np.array([rows[i][1] for i in keep])
    plain = engine.default_table(blocks)
    extended = plain.with_model(EXTENDED, "bhive")

    t0 = time.perf_counter()
    found = [harness.accesses(b, "bhive") for b in blocks]
    t_emulate = time.perf_counter() - t0
    reasons = collections.Counter(a.status.split(" (")[0].split(" at instruction")[0] for a in found)
    with_accesses = [a.attach(b) for a, b in zip(found, blocks)]

    engine.compile(plain), engine.compile(extended)
    engine.simulate(blocks[:50], plain), engine.simulate(with_accesses[:50], extended)  # warm
    t0 = time.perf_counter()
    base = engine.simulate(blocks, plain, threads=args.threads)
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    ext = engine.simulate(with_accesses, extended, threads=args.threads)
    t_ext = time.perf_counter() - t0

    n = len(blocks)
    print(f"{n} BHive blocks, -mcpu={args.mcpu}, 100 iterations, {args.threads} threads")
    print(f"llvm-mca model : {n / t_plain:8.1f} simulations/s")
    print(f"extended model : {n / t_ext:8.1f} simulations/s  ({', '.join(EXTENDED)}; harness bhive)")
    print(f"ratio extended/llvm-mca: {t_plain / t_ext:.2f}x")
    print(f"emulation: {1e3 * t_emulate / n:.2f} ms per block ({t_emulate:.1f} s in all, one thread)")
    for reason, count in reasons.most_common(8):
        print(f"  {count:6d} {reason}")
    # The slice is fixed by llvm-mca's prediction: blocks it runs above 16 bytes a cycle.
    bytes_per_iter = np.array([sum(len(h) // 2 for h in b.encoding) for b in blocks])
    above = base.ok & (bytes_per_iter / np.maximum(base.cycles / 100, 1e-9) > 16)
    for name, result in (("llvm-mca", base), ("extended", ext)):
        ok = result.ok & (measured > 0)
        err = (result.cycles - measured) / measured
        fast = ok & above
        print(
            f"{name:9s} default table: MAPE {100 * np.abs(err[ok]).mean():6.2f}%  signed {100 * err[ok].mean():+6.2f}%"
            f"  | >16 B/cycle ({fast.sum()} blocks) signed {100 * err[fast].mean():+6.2f}%"
        )


if __name__ == "__main__":
    main()
