"""What BHive's harness divides: per CPU, the blocks with an integer division
(train and val by default; ``--split test`` for the final figure), the operands
each division sees once the block has run a few iterations from BHive's initial
state (Unicorn, ``harness.bhive``: the high half of the dividend and the
quotient's significant bits), and, per division opcode, the measured cycles an
iteration against LLVM's values under the extended model. A divider whose
latency depends on its operands (Intel's before Ice Lake) shows one regime here
when every division sees about the same operands.

    .venv/bin/python bench/division_operands.py --data ../shared/data [--mcpu skylake]
"""

import argparse
import re
from collections import defaultdict

import numpy as np
from common import add_cpus_arguments, bhive_rows
from unicorn import x86_const as X

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.ingest.blocks import block_id, canonical_hex, split_of

DIVISION = re.compile(r"I?DIV(8|16|32|64)[rm]")
ITERATIONS = 4


def operands(block, divisions: set[int]) -> list[tuple[int, int, int]] | None:
    """(high half of the dividend, low half, quotient) of each division in the last
    emulated iteration, in block order; None when the harness model cannot run it."""
    seen, pending = {}, {}

    def watch(uc, iteration, instr):
        for i in list(pending):  # the instruction after a division: its quotient is in RAX
            high, low = pending.pop(i)
            seen[i] = (high, low, uc.reg_read(X.UC_X86_REG_RAX))
        if iteration == ITERATIONS - 1 and instr in divisions:
            pending[instr] = (uc.reg_read(X.UC_X86_REG_RDX), uc.reg_read(X.UC_X86_REG_RAX))

    try:
        harness.bhive(block.encoding, ITERATIONS, watch)
    except harness.EmulationError:
        return None
    return [seen[i] for i in sorted(seen)]


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=None)
    parser.add_argument("--split", nargs="*", default=["train", "val"])
    args = parser.parse_args()
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        rows = bhive_rows(mcpu, args.blocks, args.data)
        found = [
            (c, b)
            for (h, c), b in zip(rows, engine.disassemble_many([h for h, _ in rows]))
            if b.ok and split_of(block_id(canonical_hex(h))) in args.split and any(map(DIVISION.fullmatch, b.opcodes))
        ]
        blocks = [harness.accesses(b, "bhive").attach(b) for _, b in found]
        table = engine.default_table(blocks).with_model(extended.for_cpu(mcpu), "bhive")
        predicted = engine.simulate(blocks, table).predicted("steady")
        highs, bits, by_opcode = [], [], defaultdict(list)
        for (measured, block), p in zip(found, predicted):
            divisions = {i for i, op in enumerate(block.opcodes) if DIVISION.fullmatch(op)}
            for high, _, quotient in operands(block, divisions) or []:
                highs.append(high)
                bits.append(quotient.bit_length())
            key = "+".join(sorted({block.opcodes[i] for i in divisions}))
            by_opcode[key].append((measured / 100, p / 100))
        print(f"{mcpu}: {len(found)} blocks with a division ({', '.join(args.split)}); {len(bits)} divisions emulated")
        if bits:
            print(
                f"  dividend's high half zero: {np.mean(np.array(highs) == 0):.0%};"
                f" quotient bits: median {np.median(bits):.0f}, max {max(bits)}"
                f" ({np.mean(np.array(bits) <= 4):.0%} at most 4)"
            )
        for key, pairs in sorted(by_opcode.items(), key=lambda kv: -len(kv[1])):
            m, p = np.array(pairs).T
            print(
                f"  {key:22s} {len(m):3d} blocks: measured {np.min(m):6.2f}..{np.max(m):6.2f} cycles an iteration,"
                f" LLVM's values predict {np.min(p):6.2f}..{np.max(p):6.2f} (median ratio {np.median(p / m):.2f})"
            )


if __name__ == "__main__":
    main()
