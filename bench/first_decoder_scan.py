"""Which instructions only the first decoder takes: for each opcode family given
(an LLVM name prefix), the train and val blocks of a tuned warehouse that hold
one, simulated under its newest learned table with the generation's
``complex_decoder`` rule as it is and with the family added to it (nothing
re-tuned): how many blocks change, how many come closer and go further, their
MAPE and how many are more than 20% off. A family the rule fits brings its blocks
closer; one it does not fit makes them slower than measured.

    .venv/bin/python bench/first_decoder_scan.py --warehouse W.duckdb --mcpu skylake BT SHL MOVZX
"""

import argparse
import contextlib
import dataclasses

import numpy as np
from common import Splits

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, generations
from difftune_pipeline.warehouse import tables


@contextlib.contextmanager
def first_decoder_also(mcpu: str, family: str):
    """Within it, ``mcpu``'s generation's first decoder also takes ``family``."""
    own = generations.of(mcpu)
    changed = dataclasses.replace(
        own,
        complex_decoder=(*own.complex_decoder, family),
        mechanisms=tuple(dict.fromkeys((*own.mechanisms, "complex_decoder"))),
    )
    kept = generations.GENERATIONS
    generations.GENERATIONS = tuple(changed if g is own else g for g in kept)
    try:
        yield
    finally:
        generations.GENERATIONS = kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", default="skylake")
    parser.add_argument("families", nargs="+", help="LLVM opcode name prefixes (CMOV, SETCC, SHL, ...)")
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    splits = Splits(engine, args.warehouse, args.mcpu, "bhive")
    learned = tables.load_table(args.warehouse, tables.latest_learned(args.warehouse, args.mcpu))
    with_rule = tuple(dict.fromkeys((*learned.mechanisms, "complex_decoder")))
    # the rule as the generation has it (none where it has no complex_decoder)
    base = (
        learned.with_model(with_rule, "bhive") if "complex_decoder" in generations.of(args.mcpu).mechanisms else learned
    )
    print("family    split  blocks changed closer further  MAPE before → after  >20% before → after")
    for family in args.families:
        with first_decoder_also(args.mcpu, family):
            scanned = Engine(args.mcpu)
            table = learned.with_model(with_rule, "bhive")
        for split in ("train", "val"):
            held = [i for i, b in enumerate(splits.blocks[split]) if any(o.startswith(family) for o in b.opcodes)]
            if not held:
                print(f"{family:9s} {split:6s} {0:6d}")
                continue
            blocks = [splits.blocks[split][i] for i in held]
            again = scanned.disassemble_many(["".join(b.encoding) for b in blocks])
            again = [harness.accesses(b, "bhive").attach(b) for b in again]
            measured = splits.measured[split][held]
            before = engine.simulate(blocks, base).predicted("steady")
            after = scanned.simulate(again, table).predicted("steady")
            was, now = (np.abs(p - measured) / measured for p in (before, after))
            print(
                f"{family:9s} {split:6s} {len(held):6d} {(before != after).sum():7d} {(now < was).sum():6d} "
                f"{(now > was).sum():7d}  {100 * was.mean():6.2f}% → {100 * now.mean():6.2f}%  "
                f"{(was > 0.2).sum():5d} → {(now > 0.2).sum():5d}"
            )


if __name__ == "__main__":
    main()
