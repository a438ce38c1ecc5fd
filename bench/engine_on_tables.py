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
        learned = tables.latest_learned(args.warehouse, mcpu)
        if learned is None:
            print(f"{mcpu}: no learned table in {args.warehouse}")
            continue
        table = tables.load_table(args.warehouse, learned)
        for split in SPLITS:
            key, measured = f"{mcpu}/{split}", splits.measured[split]
            predicted = engine.simulate(splits.blocks[split], table).predicted("steady")
            kept[key], kept[f"{key}/blocks"] = predicted, np.array(["".join(b.encoding) for b in splits.blocks[split]])
            ok = np.isfinite(predicted)
            error = np.abs(predicted - measured) / measured
            print(
                f"{mcpu} {split} ({learned}): {ok.sum()} blocks simulated, {(~ok).sum()} failed; "
                f"MAPE {100 * error[ok].mean():.3f}%, tau {kendall_tau(predicted[ok], measured[ok]):.4f}, "
                f">20% off {100 * (error[ok] > 0.2).mean():.2f}%"
            )
            if key in before:
                if not np.array_equal(before[f"{key}/blocks"], kept[f"{key}/blocks"]):
                    raise SystemExit(f"--against holds other {key} blocks: not the same warehouse")
                was = before[key]
                both = ok & np.isfinite(was)
                moved = both & (np.abs(predicted - was) > 0.5)
                error_was = np.abs(was - measured) / measured
                print(
                    f"  against --against: {moved.sum()} blocks moved, {(moved & (error < error_was)).sum()} closer, "
                    f"{(moved & (error > error_was)).sum()} further"
                    + (
                        f"; MAPE there {100 * error_was[moved].mean():.1f}% -> {100 * error[moved].mean():.1f}%"
                        if moved.any()
                        else ""
                    )
                    + f"; {(ok != np.isfinite(was)).sum()} failed in one checkout only"
                )
    if args.save:
        np.savez(args.save, **kept)


if __name__ == "__main__":
    main()
