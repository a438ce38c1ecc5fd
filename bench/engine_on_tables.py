"""A change to the engine on a tuned warehouse: per µarch, the newest learned table
scored on the train and val splits by this checkout's engine (nothing re-tuned):
MAPE, Kendall τ and the share of blocks more than 20% off. ``--save`` keeps the
predictions; run again from another checkout with ``--against`` that file to see
which blocks the change moved (how many, how many came closer and went further,
and their MAPE before and after).

    .venv/bin/python bench/engine_on_tables.py --warehouse W.duckdb [--mcpu haswell] --save before.npz
    (another checkout) .venv/bin/python bench/engine_on_tables.py --warehouse W.duckdb --against before.npz
"""

import argparse

import numpy as np
from common import Splits

from difftune_pipeline.engine import Engine
from difftune_pipeline.model.metrics import kendall_tau
from difftune_pipeline.warehouse import tables

SPLITS = ("train", "val")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "ivybridge", "skylake"])
    parser.add_argument("--save", help="keep the predictions in this .npz file")
    parser.add_argument("--against", help="predictions --save kept from another checkout")
    args = parser.parse_args()
    before = dict(np.load(args.against)) if args.against else {}
    kept = {}
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        splits = Splits(engine, args.warehouse, mcpu, "bhive")
        table = tables.load_table(args.warehouse, tables.latest_learned(args.warehouse, mcpu))
        for split in SPLITS:
            measured = splits.measured[split]
            predicted = engine.simulate(splits.blocks[split], table).predicted("steady")
            kept[f"{mcpu}/{split}"] = predicted
            error = np.abs(predicted - measured) / measured
            print(
                f"{mcpu} {split}: {len(measured)} blocks, MAPE {100 * np.nanmean(error):.3f}%, "
                f"tau {kendall_tau(predicted, measured):.4f}, >20% off {100 * np.nanmean(error > 0.2):.2f}%"
            )
            if f"{mcpu}/{split}" in before:
                was = before[f"{mcpu}/{split}"]
                moved = np.abs(predicted - was) > 0.5
                error_was = np.abs(was - measured) / measured
                print(
                    f"  against --against: {moved.sum()} blocks moved, {(moved & (error < error_was)).sum()} closer, "
                    f"{(moved & (error > error_was)).sum()} further; MAPE there "
                    f"{100 * np.nanmean(error_was[moved]):.1f}% -> {100 * np.nanmean(error[moved]):.1f}%"
                )
    if args.save:
        np.savez(args.save, **kept)


if __name__ == "__main__":
    main()
