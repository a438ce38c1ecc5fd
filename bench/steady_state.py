"""The steady state the engine reports (cycles per 100 iterations once the cycles
between iterations repeat, from the same simulation as llvm-mca's Total Cycles, or
from one twice as long where that one never repeats)
against BHive's own quantity computed the slow way: ``cycles(200) - cycles(100)``,
the difference of two iteration counts, from the ``llvm-mca`` binary and from the
engine; and its cost against a 100-iteration simulation, side by side in one run.

    .venv/bin/python bench/steady_state.py [--blocks 1000] [--mcpu haswell ...] [--data ../shared/data]
"""

import argparse
import time

import numpy as np
from common import add_cpus_arguments, bhive_blocks, bhive_rows, reassembled

from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.reference import llvm_mca_many
from difftune_pipeline.model.metrics import kendall_tau, mape


def agreement(steady: np.ndarray, difference: np.ndarray) -> str:
    gap = np.abs(steady - difference)
    n = len(gap)
    return (
        f"equal {np.sum(gap == 0)}/{n} ({100 * np.mean(gap == 0):.1f}%), "
        f"within 1 cycle {np.sum(gap <= 1)}/{n} ({100 * np.mean(gap <= 1):.1f}%), "
        f"mean |gap| {gap.mean():.2f} cycles ({100 * np.mean(gap / np.maximum(difference, 1)):.3f}%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=1000)
    parser.add_argument("--binary", type=int, default=300, help="blocks also run through the llvm-mca binary")
    args = parser.parse_args()
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        rows = bhive_rows(mcpu, args.blocks, args.data)
        blocks = reassembled(engine, bhive_blocks(engine, args.blocks, args.data))
        measured = np.array([c for _, c in rows])
        engine.compile(None)
        t0 = time.perf_counter()
        r100 = engine.simulate(blocks, threads=2)
        t100 = time.perf_counter() - t0
        t0 = time.perf_counter()
        r200 = engine.simulate(blocks, threads=2, iterations=200)
        t200 = time.perf_counter() - t0
        ok = r100.ok & r200.ok
        difference = (r200.cycles - r100.cycles).astype(float)
        print(f"{mcpu}: {ok.sum()} BHive blocks, llvm-mca's table and model, 2 threads")
        print(
            f"  cost: the steady state comes with the 100-iteration simulation that gives Total Cycles "
            f"({t100:.2f} s, with the runs that never repeat run again twice as long); "
            f"cycles(200) - cycles(100) takes {t100 + t200:.2f} s, {(t100 + t200) / t100:.2f}x"
        )
        print(f"  steady state vs the engine's cycles(200) - cycles(100): {agreement(r100.steady[ok], difference[ok])}")
        k = min(args.binary, len(blocks))
        if k:
            asm = [list(b.asm) for b in blocks[:k]]
            b100, b200 = llvm_mca_many(asm, mcpu), llvm_mca_many(asm, mcpu, iterations=200)
            fine = np.array([a is not None and b is not None for a, b in zip(b100, b200)]) & ok[:k]
            binary = np.array([(b or 0) - (a or 0) for a, b in zip(b100, b200)], dtype=float)
            print(
                f"  steady state vs the llvm-mca binary's cycles(200) - cycles(100), {fine.sum()} blocks: "
                f"{agreement(r100.steady[:k][fine], binary[fine])}"
            )
        for name, pred in [
            ("Total Cycles at 100 iterations", r100.cycles.astype(float)),
            ("steady state", r100.steady),
            ("cycles(200) - cycles(100)", difference),
        ]:
            print(f"  against BHive's measurements, {name:32s} MAPE {100 * mape(pred[ok], measured[ok]):6.2f}%  "
                  f"tau {kendall_tau(pred[ok], measured[ok]):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
