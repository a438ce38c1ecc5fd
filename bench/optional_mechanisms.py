"""What each mechanism does to the blocks it changes, as ``auto`` judges it: per CPU
and split, under LLVM's values with BHive's harness addresses, how many blocks it
changes, how many come closer to the measurement and how many go further, their
MAPE without and with it (``metrics.helps_where_it_changes``), and the whole
split's MAPE and share of blocks more than 20% off. Train and val (what ``auto``
weighs and designs are made on); ``--test`` adds the test split, the final figure. Those ``extended`` leaves out
(``locked``, ``move_elimination``) are added to it; with ``--extended``, each of
``extended``'s own is also taken out of it. Splits by block hash, as the pipeline's.

    .venv/bin/python bench/optional_mechanisms.py --data ../shared/data [--mcpu haswell] [--blocks 4000]
        [--extended] [--test]
"""

import argparse

import numpy as np
from common import add_cpus_arguments, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.engine.mechanisms import REQUIRES
from difftune_pipeline.ingest.blocks import block_id, canonical_hex, split_of
from difftune_pipeline.model.metrics import helps_where_it_changes, mape
from difftune_pipeline.steps.context import SPLITS


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=None)
    parser.add_argument("--extended", action="store_true", help="also each of extended's mechanisms, taken out")
    parser.add_argument("--test", action="store_true", help="also the test split")
    args = parser.parse_args()
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        rows = bhive_rows(mcpu, args.blocks, args.data)
        found = [(h, c, b) for (h, c), b in zip(rows, engine.disassemble_many([h for h, _ in rows])) if b.ok]
        blocks = [harness.accesses(b, "bhive").attach(b) for _, _, b in found]
        truth = np.array([c for _, c, _ in found])
        split = np.array([split_of(block_id(canonical_hex(h))) for h, _, _ in found])
        llvm, own = engine.default_table(blocks), extended.for_cpu(mcpu)
        full = engine.simulate(blocks, llvm.with_model(own, "bhive")).steady
        pairs = [
            (m, full, engine.simulate(blocks, llvm.with_model((*own, m), "bhive")).steady)
            for m in extended.optional(mcpu)
        ]
        if args.extended:
            for m in own:
                without = [x for x in own if x != m and m not in REQUIRES.get(x, ())]
                pairs.append((m, engine.simulate(blocks, llvm.with_model(without, "bhive")).steady, full))
        for mechanism, before, after in pairs:
            for name in SPLITS if args.test else ("train", "val"):
                part = split == name
                helps, how = helps_where_it_changes(before[part], after[part], truth[part])
                off = [np.mean(np.abs(p[part] - truth[part]) > 0.2 * truth[part]) for p in (before, after)]
                shares = [f"{100 * x:.2f}%" for x in off]
                whole = f"{100 * mape(before[part], truth[part]):.2f}% -> {100 * mape(after[part], truth[part]):.2f}%"
                print(
                    f"{mcpu:10s} {mechanism:17s} {name:5s} {'helps' if helps else 'does not help'}: {how}; "
                    f"split MAPE {whole}, >20% off {' -> '.join(shares)}"
                )


if __name__ == "__main__":
    main()
