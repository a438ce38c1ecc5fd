"""What each mechanism ``extended`` leaves out (``locked``, ``move_elimination``) does
to the blocks it changes, as ``auto`` judges it: per CPU and split, under LLVM's
values with BHive's harness addresses, how many blocks it changes, how many come
closer to the measurement and how many go further, and their MAPE without and with
it (``metrics.helps_where_it_changes``). Splits by block hash, as the pipeline's.

    .venv/bin/python bench/optional_mechanisms.py --data ../shared/data [--mcpu haswell] [--blocks 4000]
"""

import argparse

import numpy as np
from common import add_cpus_arguments, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.ingest.blocks import block_id, canonical_hex, split_of
from difftune_pipeline.model.metrics import helps_where_it_changes
from difftune_pipeline.steps.context import SPLITS


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=None)
    args = parser.parse_args()
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        rows = bhive_rows(mcpu, args.blocks, args.data)
        found = [(h, c, b) for (h, c), b in zip(rows, engine.disassemble_many([h for h, _ in rows])) if b.ok]
        blocks = [harness.accesses(b, "bhive").attach(b) for _, _, b in found]
        truth = np.array([c for _, c, _ in found])
        split = np.array([split_of(block_id(canonical_hex(h))) for h, _, _ in found])
        llvm, own = engine.default_table(blocks), extended.for_cpu(mcpu)
        before = engine.simulate(blocks, llvm.with_model(own, "bhive")).steady
        for mechanism in extended.optional(mcpu):
            after = engine.simulate(blocks, llvm.with_model((*own, mechanism), "bhive")).steady
            for name in SPLITS:
                part = split == name
                helps, how = helps_where_it_changes(before[part], after[part], truth[part])
                print(f"{mcpu:10s} {mechanism:17s} {name:5s} {'helps' if helps else 'does not help'}: {how}")


if __name__ == "__main__":
    main()
