"""In-process engine vs one llvm-mca subprocess per block, both with 2 workers,
on the same BHive Haswell blocks; results must be identical.

    .venv/bin/python bench/engine_speed.py [--blocks 1000] [--data ../shared/data]
"""

import argparse
import time

from common import add_data_argument, bhive_rows

from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.reference import llvm_mca_many


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--mcpu", default="haswell")
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    texts = ["\n".join(engine.disassemble(h).asm) for h, _ in bhive_rows(args.mcpu, args.blocks, args.data)]
    blocks = [engine.parse_asm(t) for t in texts]
    engine.compile(None)

    t0 = time.perf_counter()
    ours = engine.simulate(blocks, threads=2)
    t_engine = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = llvm_mca_many([list(b.asm) for b in blocks], args.mcpu, workers=2)
    t_binary = time.perf_counter() - t0

    same = sum(int(c) == r for c, r in zip(ours.cycles, ref))
    n = len(blocks)
    print(f"{n} blocks, -mcpu={args.mcpu}, 100 iterations, 2 workers each")
    print(f"identical results: {same}/{n}")
    print(f"in-process engine : {n / t_engine:8.1f} blocks/s ({t_engine:.2f} s)")
    print(f"llvm-mca per block: {n / t_binary:8.1f} blocks/s ({t_binary:.2f} s)")
    print(f"speed-up: {t_binary / t_engine:.1f}x")


if __name__ == "__main__":
    main()
