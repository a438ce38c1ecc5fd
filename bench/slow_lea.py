"""The slow LEA on a tuned warehouse: per µarch, on the train and val splits, the
newest learned table and LLVM's values under the extended model, each with and
without ``slow_lea`` (nothing re-tuned): the split's MAPE and share of blocks more
than 20% off, and the MAPE and mean signed error of the blocks with a slow LEA
(``Block.operands``' ``slow_lea``). A warehouse tuned before the mechanism
existed shows what it adds to those tables; one tuned with it, what taking it
out costs them.

    .venv/bin/python bench/slow_lea.py --warehouse W.duckdb [--mcpu haswell ivybridge skylake]
"""

import argparse

import numpy as np
from common import Splits

from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.warehouse import tables


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "ivybridge", "skylake"])
    args = parser.parse_args()
    print("µarch       table    slow_lea  split  MAPE    >20% off  slow-LEA blocks: n  MAPE    signed")
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        splits = Splits(engine, args.warehouse, mcpu, "bhive")
        learned = tables.load_table(args.warehouse, tables.latest_learned(args.warehouse, mcpu))
        llvm = splits.default(extended.for_cpu(mcpu), "bhive")
        for name, table in (("LLVM's", llvm), ("learned", learned)):
            without = table.with_model(tuple(m for m in table.mechanisms if m != "slow_lea"), "bhive")
            for label, t in (("off", without), ("on", without.with_model((*without.mechanisms, "slow_lea"), "bhive"))):
                for split in ("train", "val"):
                    blocks, measured = splits.blocks[split], splits.measured[split]
                    predicted = engine.simulate(blocks, t).predicted("steady")
                    ok = np.isfinite(predicted)
                    error = (predicted[ok] - measured[ok]) / measured[ok]
                    slow = np.array([any(o["slow_lea"] for o in b.operands) for b in blocks])[ok]
                    print(
                        f"{mcpu:11s} {name:8s} {label:9s} {split:6s} {100 * np.mean(np.abs(error)):5.2f}%  "
                        f"{100 * np.mean(np.abs(error) > 0.2):5.2f}%    {slow.sum():5d}  "
                        f"{100 * np.mean(np.abs(error[slow])):6.2f}%  {100 * np.mean(error[slow]):+6.2f}%"
                    )


if __name__ == "__main__":
    main()
