"""L1 bank conflicts on BHive's blocks: the error of LLVM's values under the
extended model on the blocks whose first iteration holds two loads of one L1
bank (address bits 2-5) in different sets (bits 6-12), at BHive's harness
addresses, against the blocks with two loads and no such pair; on Sandy and
Ivy Bridge with and without the ``bank_conflict`` mechanism (penalties 1 and 2).
A CPU without the conflicts (Haswell on) shows no bias on that slice.

    .venv/bin/python bench/bank_conflicts.py --data ../shared/data [--mcpu ivybridge haswell skylake] \
        [--skip 1000] [--blocks 3000]
"""

import numpy as np
from common import windows

from difftune_pipeline.engine import extended


def banks(address: int, size: int) -> int:
    """The 4-byte banks (of 16) an access reads, as a mask."""
    return sum({1 << (word & 15) for word in range(address >> 2, ((address + size - 1) >> 2) + 1)})


def first_loads(block) -> list[tuple[int, int]]:
    """(address, width) of each load of the block's first iteration."""
    return [(a, s) for it, _, a, s, store in block.accesses if it == 0 and not store]


def conflicting(block) -> bool:
    """Whether two loads of the block's first iteration read one bank in different sets."""
    loads = first_loads(block)
    return any(
        (a >> 6) & 0x7F != (b >> 6) & 0x7F and banks(a, s) & banks(b, t)
        for i, (a, s) in enumerate(loads)
        for b, t in loads[i + 1 :]
    )


def main() -> None:
    for mcpu, engine, blocks, truth in windows():
        hit = np.array([b.exact_accesses and conflicting(b) for b in blocks])
        two = np.array([len(first_loads(b)) >= 2 for b in blocks])
        slices = {"conflict": hit, "two loads, no conflict": two & ~hit, "the rest": ~hit}
        llvm = engine.default_table(blocks)
        tables = [("extended without bank_conflict", llvm.with_model(extended.EXTENDED, "bhive"))]
        if "bank_conflict" in extended.for_cpu(mcpu):
            for penalty in (1, 2):
                table = llvm.with_model(extended.for_cpu(mcpu), "bhive")
                table.globals["bank_conflict_penalty"] = penalty
                tables.append((f"with bank_conflict, penalty {penalty}", table))
        print(f"{mcpu}: {len(blocks)} blocks; " + ", ".join(f"{k} {m.sum()}" for k, m in slices.items()))
        for label, table in tables:
            error = (engine.simulate(blocks, table).predicted("steady") - truth) / truth
            cells = " ".join(
                f"{k}: {100 * np.abs(error[m]).mean():5.2f}% ({100 * error[m].mean():+.2f}%)" for k, m in slices.items()
            )
            print(f"  {label:36s} all {100 * np.abs(error).mean():5.2f}%  {cells}", flush=True)


if __name__ == "__main__":
    main()
