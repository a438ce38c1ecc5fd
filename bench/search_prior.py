"""The direct search's prior toward LLVM's values, measured: from each µarch's
default table under the extended model, the search of the ``full`` profile's
budget with each ``--prior`` (a trailing ``h``: with halving), scored on train,
val and test through the real engine, with the rows it changed.

    .venv/bin/python bench/search_prior.py --warehouse W.duckdb [--mcpu skylake] \
        [--priors 0 0.5h 1h] [--budget 192000]

W is a warehouse the ``full`` profile tuned (its splits and measurements); it
is only read.
"""

from __future__ import annotations

import argparse
import time

from common import Splits

from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.extended import EXTENDED
from difftune_pipeline.steps.context import SPLITS
from difftune_pipeline.tuners.search import SearchConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "skylake", "ivybridge"])
    parser.add_argument("--priors", nargs="*", default=["0", "0.5h", "1h"])
    parser.add_argument("--budget", type=int, default=192_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for mcpu in args.mcpu:
        measure(mcpu, args.warehouse, args.priors, args.budget, args.rounds)


def measure(mcpu: str, warehouse: str, priors: list[str], budget: int, rounds: int) -> None:
    splits = Splits(Engine(mcpu), warehouse, mcpu, "bhive")
    default = splits.default(EXTENDED, "bhive")
    print(f"{mcpu}: default train / val / test MAPE", *(f"{100 * splits.scored(default, s)[0]:.2f}%" for s in SPLITS))
    for prior in priors:
        config = SearchConfig(budget=budget, rounds=rounds, prior=float(prior.rstrip("h")), halving=prior.endswith("h"))
        t0 = time.perf_counter()
        table = splits.search(default, config)
        (train, _), (val, _), (test, tau) = (splits.scored(table, s) for s in SPLITS)
        print(
            f"  prior {prior:>5s}: train {100 * train:.2f}%  val {100 * val:.2f}%  test {100 * test:.2f}% "
            f"(tau {tau:.3f})  rows changed {len(table.changed_rows(default))}  "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
