"""Exactness of the engine under LLVM's default tables against the llvm-mca binary
of the same LLVM, on every block of BHive's Haswell, Ivy Bridge and Skylake files.

Both sides get the same input: the AT&T text of the disassembled block. The hex
path (the disassembled instructions themselves) is also reported: it differs only
where re-assembling the text picks another encoding (e.g. push imm32 -> imm8).

    .venv/bin/python bench/engine_exactness.py [--blocks N] [--mcpu haswell ...] [--data ../shared/data]
"""

import argparse
import time

from common import add_cpus_arguments, reassembled, timed_cpus

from difftune_pipeline.engine import LLVM_VERSION
from difftune_pipeline.engine.reference import llvm_mca_many


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=None)
    args = parser.parse_args()
    print(f"LLVM {LLVM_VERSION}")
    for mcpu, t0, engine, direct in timed_cpus(args):
        texts = reassembled(engine, direct)
        ours = engine.simulate(texts, threads=2).cycles.tolist()
        ref = llvm_mca_many([list(b.asm) for b in texts], mcpu)
        same = sum(c == r for c, r in zip(ours, ref))
        failed_ref = sum(r is None for r in ref)
        hex_path = engine.simulate(direct, threads=2).cycles.tolist()
        changed = sum(a.opcodes != b.opcodes for a, b in zip(direct, texts))
        hex_same = sum(c == r for c, r in zip(hex_path, ref))
        n = len(direct)
        print(
            f"{mcpu:10s} text path: {same}/{n} identical ({100 * same / n:.2f}%), binary failed on {failed_ref}; "
            f"hex path: {hex_same}/{n} identical, {changed} blocks re-assemble to other opcodes; "
            f"{time.perf_counter() - t0:.0f} s"
        )
        for c, r, b in zip(ours, ref, texts):
            if c != r:
                print(f"   differs: engine {c} vs llvm-mca {r}: {' ; '.join(b.asm)[:150]}")


if __name__ == "__main__":
    main()
