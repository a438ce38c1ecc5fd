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

from ablation import split_blocks

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.extended import EXTENDED
from difftune_pipeline.model.metrics import kendall_tau, mape
from difftune_pipeline.tuners.search import SearchConfig, search


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
    engine = Engine(mcpu)
    data = {s: split_blocks(engine, warehouse, mcpu, s) for s in ("train", "val", "test")}
    blocks = {s: [harness.accesses(b, "bhive").attach(b) for b in d[1]] for s, d in data.items()}
    default = engine.default_table([b for d in data.values() for b in d[1]]).with_model(EXTENDED, "bhive")

    def scored(table, split):
        r = engine.simulate(blocks[split], table)
        truth = data[split][2][r.ok]
        return mape(r.cycles[r.ok], truth), kendall_tau(r.cycles[r.ok], truth)

    print(f"{mcpu}: default train / val / test MAPE", *(f"{100 * scored(default, s)[0]:.2f}%" for s in data))
    for prior in priors:
        config = SearchConfig(budget=budget, rounds=rounds, prior=float(prior.rstrip("h")), halving=prior.endswith("h"))
        t0 = time.perf_counter()
        table, _ = search(
            engine,
            blocks["train"],
            data["train"][2],
            default,
            lambda t: scored(t, "val")[0],
            config,
            log=lambda *_: None,
        )
        (train, _), (val, _), (test, tau) = (scored(table, s) for s in data)
        print(
            f"  prior {prior:>5s}: train {100 * train:.2f}%  val {100 * val:.2f}%  test {100 * test:.2f}% "
            f"(tau {tau:.3f})  rows changed {len(table.changed_rows(default))}  "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
