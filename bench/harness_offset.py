"""How far BHive's figures sit under the steady state (``harness_offset``): per
CPU, under LLVM's values and the extended model without the offset, on the
train and val splits only: the median of predicted less measured cycles per 100
iterations, overall and by block length; how many blocks measure faster than
the issue width lets their instructions issue (no pipeline can predict them);
and each split's MAPE with 0 to 3 cycles per 100 iterations taken off.

    .venv/bin/python bench/harness_offset.py --data ../shared/data [--mcpu haswell] [--blocks 4000]
"""

import argparse

import numpy as np
from common import add_cpus_arguments, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.ingest.blocks import block_id, canonical_hex, split_of
from difftune_pipeline.model.metrics import mape

LENGTHS = ((1, 1), (2, 3), (4, 6), (7, 10), (11, 10_000))


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cpus_arguments(parser, blocks=None)
    args = parser.parse_args()
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        rows = bhive_rows(mcpu, args.blocks, args.data)
        found = [
            (c, b, split_of(block_id(canonical_hex(h))))
            for (h, c), b in zip(rows, engine.disassemble_many([h for h, _ in rows]))
            if b.ok
        ]
        found = [f for f in found if f[2] != "test"]  # design data only
        blocks = [harness.accesses(b, "bhive").attach(b) for _, b, _ in found]
        truth = np.array([c for c, _, _ in found])
        split = np.array([s for _, _, s in found])
        length = np.array([len(b.asm) for b in blocks])
        own = tuple(m for m in extended.for_cpu(mcpu) if m != "harness_offset")
        table = engine.default_table(blocks).with_model(own, "bhive")
        predicted = engine.simulate(blocks, table).steady
        ok = np.isfinite(predicted)
        train = ok & (split == "train")
        over = predicted - truth
        bands = ", ".join(
            f"{lo}-{hi if hi < 10_000 else ''}: {np.median(over[train & (length >= lo) & (length <= hi)]):+.2f}"
            for lo, hi in LENGTHS
        )
        print(f"{mcpu}: train median of predicted - measured {np.median(over[train]):+.2f} cycles/100 ({bands})")
        under = ok & (truth < 100 * length / table.globals["issue_width"])
        print(f"  train and val blocks measured under the issue bound: {under.sum()} of {ok.sum()}")
        for name in ("train", "val"):
            part = ok & (split == name)
            scores = "  ".join(f"{c}: {100 * mape(predicted[part] - c, truth[part]):.2f}%" for c in range(4))
            print(f"  {name:5s} MAPE with c cycles/100 taken off  {scores}")


if __name__ == "__main__":
    main()
