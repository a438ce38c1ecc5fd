"""A change to the engine on a tuned warehouse: per µarch, the newest learned table
scored on the train and val splits by this checkout's engine (nothing re-tuned):
MAPE, Kendall τ and the share of blocks more than 20% off. ``--save`` keeps the
predictions; run again from another checkout with ``--against`` that file to see
which blocks the change moved (``metrics.helps_where_it_changes``: how many, how
many came closer and went further, and their MAPE before and after).

    .venv/bin/python bench/engine_on_tables.py --warehouse W.duckdb [--mcpu haswell] --save before.npz
    (another checkout) .venv/bin/python bench/engine_on_tables.py --warehouse W.duckdb --against before.npz
"""

import argparse

import numpy as np
from common import Splits

from difftune_pipeline.engine import Engine
from difftune_pipeline.model.metrics import helps_where_it_changes, scored
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
        learned = tables.latest_learned(args.warehouse, mcpu)
        if learned is None:
            print(f"{mcpu}: no learned table in {args.warehouse}")
            continue
        table = tables.load_table(args.warehouse, learned)
        for split in SPLITS:
            key, measured = f"{mcpu}/{split}", splits.measured[split]
            result = engine.simulate(splits.blocks[split], table)
            predicted = result.predicted("steady")
            kept[key], kept[f"{key}/blocks"] = predicted, np.array(["".join(b.encoding) for b in splits.blocks[split]])
            error, tau = scored(result, measured)
            off = np.abs(predicted[result.ok] - measured[result.ok]) / measured[result.ok] > 0.2
            print(
                f"{mcpu} {split} ({learned}): {result.ok.sum()} blocks simulated, {(~result.ok).sum()} failed; "
                f"MAPE {100 * error:.3f}%, tau {tau:.4f}, >20% off {100 * off.mean():.2f}%"
            )
            if key in before:
                if not np.array_equal(before[f"{key}/blocks"], kept[f"{key}/blocks"]):
                    raise SystemExit(f"--against holds other {key} blocks: not the same warehouse")
                failed_once = (result.ok != np.isfinite(before[key])).sum()
                _, moved = helps_where_it_changes(before[key], predicted, measured)
                print(f"  against --against: {moved}; {failed_once} failed in one checkout only")
    if args.save:
        np.savez(args.save, **kept)


if __name__ == "__main__":
    main()
