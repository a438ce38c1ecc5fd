"""Traces against llvm-mca's own views, block by block: total cycles, every
timeline cycle (dispatched, ready, issued, executed, retired) of the first
iterations, every resource-pressure value and the bottleneck analysis's
percentages, under LLVM's default tables, on BHive's blocks.

    .venv/bin/python bench/trace_exactness.py [--blocks 1000] [--mcpu haswell ...] [--data ../shared/data]
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from common import add_cpus_arguments, reassembled, timed_cpus

from difftune_pipeline.engine import LLVM_VERSION
from difftune_pipeline.engine.reference import llvm_mca_views, view_differences

ITERATIONS, SHOWN = 100, 10


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=1000)
    args = parser.parse_args()
    print(f"LLVM {LLVM_VERSION}, {ITERATIONS} iterations, timeline of the first {SHOWN}")
    for mcpu, t0, engine, direct in timed_cpus(args):
        blocks = reassembled(engine, [b for b in direct if b.ok])
        with ThreadPoolExecutor(2) as pool:
            refs = list(pool.map(lambda b, m=mcpu: llvm_mca_views(list(b.asm), m, ITERATIONS, SHOWN), blocks))
        same = refused = entries = 0
        for block, (doc, text) in zip(blocks, refs):
            if doc is None:
                refused += 1
                continue
            trace = engine.trace(block, iterations=ITERATIONS, shown=SHOWN)
            differences = view_differences(trace, doc, text)
            same += not differences
            entries += len(trace.timeline)
            if differences:
                print(f"   differs: {' ; '.join(block.asm)[:120]}: {differences[0][:200]}")
        compared = len(blocks) - refused
        print(
            f"{mcpu:10s} {same}/{compared} blocks identical in every view ({entries} timeline entries), "
            f"llvm-mca refused {refused}; {time.perf_counter() - t0:.0f} s"
        )


if __name__ == "__main__":
    main()
