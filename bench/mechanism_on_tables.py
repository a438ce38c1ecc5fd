"""A mechanism on a tuned warehouse: per µarch, on the train and val splits, the
newest learned table and LLVM's values under the extended model, each without and
with the mechanism (nothing re-tuned): the split's MAPE and share of blocks more
than 20% off, and the blocks whose prediction the mechanism changes (how many,
how many come closer and go further, their MAPE and mean signed error). A
warehouse tuned before the mechanism existed shows what it adds to those tables;
one tuned with it, what taking it out costs them.

    .venv/bin/python bench/mechanism_on_tables.py --warehouse W.duckdb --mechanism folded_load [--mcpu haswell]
        [--set forwarded_load_latency=3]

``--set`` gives the mechanism's parameters other values than the tables' (its
defaults, for a table that lacks it).
"""

import argparse

import numpy as np
from common import Splits

from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.warehouse import tables


def pct(values, spec: str = "5.2f") -> str:
    return f"{100 * np.mean(values):{spec}}%"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mechanism", required=True)
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "ivybridge", "skylake"])
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    values = {name: int(value) for name, value in (item.split("=") for item in args.set)}
    print(
        "µarch       table    split  MAPE off → on    >20% off → on   "
        "changed: n  closer further  MAPE off → on    signed off → on"
    )
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        splits = Splits(engine, args.warehouse, mcpu, "bhive")
        learned = tables.load_table(args.warehouse, tables.latest_learned(args.warehouse, mcpu))
        llvm = splits.default(extended.for_cpu(mcpu), "bhive")
        for name, table in (("LLVM's", llvm), ("learned", learned)):
            off = table.with_model(tuple(m for m in table.mechanisms if m != args.mechanism), "bhive")
            on = off.with_model((*off.mechanisms, args.mechanism), "bhive")
            on.globals.update(values)
            for split in ("train", "val"):
                measured = splits.measured[split]
                before, after = (engine.simulate(splits.blocks[split], t).predicted("steady") for t in (off, on))
                ok = np.isfinite(before) & np.isfinite(after)
                was, now = ((p[ok] - measured[ok]) / measured[ok] for p in (before, after))
                changed, closer, further = before[ok] != after[ok], np.abs(now) < np.abs(was), np.abs(now) > np.abs(was)
                print(
                    f"{mcpu:11s} {name:8s} {split:6s} {pct(np.abs(was))} → {pct(np.abs(now))}  "
                    f"{pct(np.abs(was) > 0.2)} → {pct(np.abs(now) > 0.2)}  "
                    f"{changed.sum():5d}  {closer.sum():6d} {further.sum():7d}  "
                    f"{pct(np.abs(was[changed]))} → {pct(np.abs(now[changed]))}  "
                    f"{pct(was[changed], '+6.2f')} → {pct(now[changed], '+6.2f')}"
                )


if __name__ == "__main__":
    main()
